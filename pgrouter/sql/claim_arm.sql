-- One arm of the claim (claim.sql), for the kind @kind_{n}: the queue's
-- pending jobs of that kind in the ready order, unlocked, bounded by
-- claimArmBound (65536). A template: claimStatement writes N for {n}.
		SELECT * FROM (SELECT ctid, queue, id, kind, priority, ready_at, seq, {n} AS arm FROM leaserouter_jobs
			WHERE queue = @queue AND kind = @kind_{n} AND state = 'pending'
			ORDER BY priority DESC, ready_at, seq LIMIT 65536) a{n}
