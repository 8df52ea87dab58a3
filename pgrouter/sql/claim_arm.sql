-- One arm of the claim (claim.sql), for the kind @kind_{n}: the queue's
-- pending jobs of that kind in the ready order, unlocked, bounded by
-- claimArmBound (65536). A template: claimStatement writes N for {n}.
-- The state test is written state <= 'pending' ('pending' is the enum's
-- first label): leaserouter_jobs_kind_ready's predicate, not the old
-- leaserouter_jobs_ready's, so no plan walks the old index with the kind
-- as a filter (see migration 0015).
		SELECT * FROM (SELECT ctid, queue, id, kind, priority, ready_at, seq, {n} AS arm FROM /*schema*/leaserouter_jobs
			WHERE queue = @queue AND kind = @kind_{n} AND state <= 'pending'
			ORDER BY priority DESC, ready_at, seq LIMIT 65536) a{n}
