-- Makes each job of @queue named in @ids pending again at once if it is
-- finished (succeeded, failed or canceled), retained, and in one of
-- @states (their names): ready now, attempt 0 (its next lease is attempt
-- 1 of max_attempts), no owner, no purge time; its token, seq (its place
-- in the enqueue order), last error and checkpoint stay. It runs after
-- jobs_settle.sql in the same transaction, which locked the rows in ID
-- order and settled the expired leases among them, so it waits for no row
-- (a row enqueued since and locked by another transaction is skipped, as if
-- the call had come before it): a bulk call never deadlocks with another
-- or with Run's completions. Each job is judged by its state then, a
-- change committed meanwhile seen. It returns a row per job of @ids the
-- queue knows (a finished job past its retention is not known): its ID,
-- its state before, and, if it was retried now, its token and the
-- instant. If any was, it notifies @channel once (with the update, so
-- only if it commits), so that waiters in every process claim. Retry is
-- this statement with one ID and every state; RetryMany, with the IDs and
-- states an operator chose.
WITH was AS (
	SELECT id, state FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND id = ANY(@ids::text[]) AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
	ORDER BY id
	FOR UPDATE SKIP LOCKED),
c AS (SELECT clock_timestamp() AS now),
upd AS (
	UPDATE /*schema*/leaserouter_jobs j SET state = 'pending', ready_at = c.now, requeued = false, attempt = 0, owner = '',
		lease_expires_at = NULL, purge_at = NULL, updated_at = c.now
	FROM was, c
	WHERE j.queue = @queue AND j.id = was.id AND was.state IN ('succeeded', 'failed', 'canceled')
		AND was.state = ANY(@states::text[]::/*schema*/leaserouter_job_state[])
	RETURNING j.id, j.token, j.updated_at),
n AS (SELECT pg_notify(@channel, @queue) WHERE EXISTS (SELECT FROM upd))
SELECT was.id, was.state::text, upd.token, upd.updated_at, (SELECT count(*) FROM n)
FROM was LEFT JOIN upd USING (id)
