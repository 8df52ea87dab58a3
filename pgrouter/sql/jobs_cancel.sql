-- Makes each job of @queue named in @ids canceled if it is pending,
-- scheduled or leased (a lease ends with reason 'canceled': its holder's
-- next operation is refused) and in one of @states (their names), purged
-- @retention_us microseconds later. It runs after jobs_settle.sql in the
-- same transaction, which locked the rows in ID order and settled the
-- expired leases among them, so it waits for no row (a row enqueued since
-- and locked by another transaction is skipped, as if the call had come
-- before it): a bulk call never deadlocks with another or with Run's
-- completions. Each job is judged by its state then, a pending job leased
-- meanwhile seen leased. It returns a row per job of @ids the queue knows
-- (a finished job past its retention is not known): its ID, its state
-- before, its holder then, and, if it was canceled now, its token,
-- attempt, the instant, and when its lease was granted (NULL if it was
-- not leased, or before schema version 4). Cancel is this statement with
-- one ID and every state; CancelMany, with the IDs and states an operator
-- chose.
WITH was AS (
	SELECT id, state, owner FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND id = ANY(@ids::text[]) AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
	ORDER BY id
	FOR UPDATE SKIP LOCKED),
c AS (SELECT clock_timestamp() AS now),
upd AS (
	UPDATE /*schema*/leaserouter_jobs j SET state = 'canceled', owner = '', lease_expires_at = NULL,
		ended = CASE WHEN j.state = 'leased' THEN 'canceled' ELSE j.ended END,
		updated_at = c.now, purge_at = c.now + @retention_us * interval '1 microsecond'
	FROM was, c
	WHERE j.queue = @queue AND j.id = was.id AND was.state IN ('pending', 'scheduled', 'leased')
		AND was.state = ANY(@states::text[]::/*schema*/leaserouter_job_state[])
	RETURNING j.id, j.token, j.attempt, j.updated_at, j.leased_at)
SELECT was.id, was.state::text, was.owner, upd.token, upd.attempt, upd.updated_at, upd.leased_at
FROM was LEFT JOIN upd USING (id)
