-- Makes each job of @queue named in @ids that is scheduled (waiting for
-- its run-at: a delay or a retry's backoff) pending at once: ready now,
-- its attempt, max_attempts, token, seq (its place in the enqueue
-- order), last error and checkpoint kept. It runs after jobs_settle.sql
-- in the same transaction, which locked the rows in ID order and
-- settled the expired leases among them, so it waits for no row (as
-- jobs_retry.sql). It returns a row per job of @ids the queue knows (a
-- finished job past its retention is not known): its ID, its state
-- before, and, if it was made pending now, the instant. If any was, it
-- notifies @channel once (with the update, so only if it commits), so
-- that waiters in every process claim. RunNow is this statement with
-- one ID.
WITH was AS (
	SELECT id, state FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND id = ANY(@ids::text[]) AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
	ORDER BY id
	FOR UPDATE SKIP LOCKED),
c AS (SELECT clock_timestamp() AS now),
upd AS (
	UPDATE /*schema*/leaserouter_jobs j SET state = 'pending', ready_at = c.now, requeued = false, updated_at = c.now
	FROM was, c
	WHERE j.queue = @queue AND j.id = was.id AND was.state = 'scheduled'
	RETURNING j.id, j.updated_at),
n AS (SELECT pg_notify(@channel, @queue) WHERE EXISTS (SELECT FROM upd))
SELECT was.id, was.state::text, upd.updated_at, (SELECT count(*) FROM n)
FROM was LEFT JOIN upd USING (id)
