-- Leases up to @n (at most claimMax, 1024) pending jobs of @queue to
-- @worker for @lease_us microseconds, in the ready order (priority, ready
-- time, enqueue order), skipping rows other claimers hold, and writes the
-- claim id @claim on them (nothing, if the claim was abandoned: see
-- outcome.go, nor while the queue is paused: its row in
-- leaserouter_queues, one probe of its primary key, a one-time filter
-- evaluated before the walk). Tokens are taken after the rows are
-- ordered, so they increase in the ready order. The walk's bound is a
-- constant (rows are locked as the outer LIMIT pulls them), @n an
-- unknown: one plan for every claim, made once per connection (a plan
-- knowing @n would be made again at each claim of one). The rows
-- reach the update as arrays (t), estimated at a few rows (n.token > 0,
-- always true, lowers the estimate: on a young table, with no
-- statistics, 10 rows made a bitmap scan of the whole queue look
-- cheaper): it finds each by key.
WITH picked AS (
	SELECT * FROM (SELECT queue, id, priority, ready_at, seq FROM leaserouter_jobs
		WHERE queue = @queue AND state = 'pending'
			AND NOT EXISTS (SELECT FROM leaserouter_abandoned_claims WHERE id = @claim)
			AND NOT EXISTS (SELECT FROM leaserouter_queues WHERE queue = @queue AND paused)
		ORDER BY priority DESC, ready_at, seq
		LIMIT 1024 FOR UPDATE SKIP LOCKED) w
	LIMIT (SELECT @n::bigint)),
numbered AS (
	SELECT id, nextval('leaserouter_token') AS token
	FROM (SELECT * FROM picked ORDER BY priority DESC, ready_at, seq) p),
c AS (SELECT clock_timestamp() AS now),
t AS (SELECT array_agg(id) AS ids, array_agg(token) AS tokens FROM numbered)
UPDATE leaserouter_jobs j SET
	state = 'leased', token = n.token, attempt = j.attempt + 1, owner = @worker, ended = '', claim = @claim,
	lease_expires_at = c.now + @lease_us * interval '1 microsecond', updated_at = c.now, leased_at = c.now
FROM t, unnest(t.ids, t.tokens) AS n(id, token), c
WHERE j.queue = @queue AND j.id = n.id AND n.token > 0
RETURNING j.id, j.payload, j.attempt, j.token, j.progress, j.lease_expires_at, j.updated_at, j.ready_at, j.requeued,
	CASE WHEN j.timeout_of = j.created_at THEN j.timeout_us ELSE 0 END
