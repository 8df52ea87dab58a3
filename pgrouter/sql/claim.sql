-- Leases up to @n (at most claimMax, 1024) pending jobs of @queue, of the
-- kinds kind_1 ... kind_k (parameters) its process serves, to @worker for @lease_us
-- microseconds, in the queue's ready order (priority, ready time,
-- enqueue order) whatever their kinds, skipping rows other claimers
-- hold, and writes the claim id @claim on them (nothing, if the claim
-- was abandoned: see outcome.go, nor while the queue is paused: its row
-- in leaserouter_queues, one probe of its primary key). Both are
-- one-time filters, evaluated once before the walk. Tokens are taken
-- after the rows are ordered, so they increase in the ready order. A
-- job of a kind not served is never read: it stays pending, its attempt
-- not counted, for a process that serves it.
--
-- This is a template: claimStatement renders it for k kinds, the line
-- {arms} becoming k arms (claim_arm.sql, arm N of the kind in parameter kind_N) joined by
-- UNION ALL. Each arm walks leaserouter_jobs_kind_ready (queue, kind,
-- priority DESC, ready_at, seq) WHERE state <= 'pending' (migration
-- 0015; its predicate, which the arms repeat, keeps every arm off the
-- kindless leaserouter_jobs_ready), and the planner merges the k walks (Merge Append: each is
-- already in the ready order), pulling each only as far as the LIMIT
-- asks: n + k - 1 index entries read, plus those of rows other claims
-- hold. The arms do not lock: a locking clause in an arm (LockRows)
-- would drop its order (PostgreSQL's create_lockrows_path: "locking
-- might cause the sort key columns to be replaced"), and the merge would
-- become a Sort pulling every arm to its bound, locking up to k times
-- 1024 rows for a claim of one. Instead each row the merge yields is
-- locked by its ctid, in the lateral subquery (FOR UPDATE SKIP LOCKED,
-- the row's filters checked again on its latest version), as the LIMIT
-- pulls it: exactly the rows taken are locked (a row changed since the
-- walk's snapshot is locked in its latest version if that is still a
-- pending job of the same kind, else skipped). By ctid, not by key: a
-- probe by (queue, id) was once planned through the partial kind_ready
-- index with id as a filter, reading the whole queue.
--
-- An arm's bound is a constant, so the statement has one plan whatever
-- n is (a plan knowing @n would be made again at each claim of one),
-- made once per connection: 65536, not claimMax, since the arms count
-- the rows other claims hold against it (they do not lock), so that 64
-- claims of 1024 in flight on one kind's head still leave a claim its
-- jobs; without a bound, custom plans sorted whole kinds.
--
-- The rows reach the update as arrays (t), estimated at a few rows
-- (n.token > 0, always true, lowers the estimate: on a young table, with
-- no statistics, 10 rows made a bitmap scan of the whole queue look
-- cheaper): it finds each by key. Each returned row carries its kind and
-- its arm (the index of its kind, from 1), for the process to dispatch.
WITH picked AS (
	SELECT c.queue, c.id, c.priority, c.ready_at, c.seq, c.arm FROM (
{arms}
		) c
	CROSS JOIN LATERAL (SELECT FROM /*schema*/leaserouter_jobs l
		WHERE l.ctid = c.ctid AND l.queue = @queue AND l.id = c.id AND l.kind = c.kind AND l.state = 'pending'
		FOR UPDATE SKIP LOCKED) l
	WHERE NOT EXISTS (SELECT FROM /*schema*/leaserouter_abandoned_claims WHERE id = @claim)
		AND NOT EXISTS (SELECT FROM /*schema*/leaserouter_queues WHERE queue = @queue AND paused)
	ORDER BY c.priority DESC, c.ready_at, c.seq
	LIMIT (SELECT @n::bigint)),
numbered AS (
	SELECT id, arm, nextval('/*schema*/leaserouter_token') AS token
	FROM (SELECT * FROM picked ORDER BY priority DESC, ready_at, seq) p),
c AS (SELECT clock_timestamp() AS now),
t AS (SELECT array_agg(id) AS ids, array_agg(token) AS tokens, array_agg(arm) AS arms FROM numbered)
UPDATE /*schema*/leaserouter_jobs j SET
	state = 'leased', token = n.token, attempt = j.attempt + 1, owner = @worker, ended = '', claim = @claim,
	lease_expires_at = c.now + @lease_us * interval '1 microsecond', updated_at = c.now, leased_at = c.now
FROM t, unnest(t.ids, t.tokens, t.arms) AS n(id, token, arm), c
WHERE j.queue = @queue AND j.id = n.id AND n.token > 0
RETURNING j.id, j.kind, n.arm, j.metadata, j.payload, j.attempt, j.token, j.progress, j.lease_expires_at, j.updated_at,
	j.ready_at, j.requeued, CASE WHEN j.timeout_of = j.created_at THEN j.timeout_us ELSE 0 END
