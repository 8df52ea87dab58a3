-- Makes job @id of @queue pending again at once if it is finished
-- (succeeded, failed or canceled) and retained: ready now, attempt 0 (its
-- next lease is attempt 1 of max_attempts), no owner, no purge time; its
-- token, seq (its place in the enqueue order), last error and checkpoint
-- stay. It returns the job's state before (NULL if the queue does not
-- know it: a finished job past its retention is not known) and, if it
-- was retried now, its token and the instant, notifying @channel (with
-- the update, so only if it commits) so that waiters in every process
-- claim it.
WITH was AS (
	SELECT state FROM leaserouter_jobs
	WHERE queue = @queue AND id = @id AND NOT leaserouter_past_retention(state, purge_at)
	FOR UPDATE),
c AS (SELECT clock_timestamp() AS now),
upd AS (
	UPDATE leaserouter_jobs j SET state = 'pending', ready_at = c.now, requeued = false, attempt = 0, owner = '',
		lease_expires_at = NULL, purge_at = NULL, updated_at = c.now
	FROM was, c
	WHERE j.queue = @queue AND j.id = @id AND was.state IN ('succeeded', 'failed', 'canceled')
	RETURNING j.token, j.updated_at),
n AS (SELECT pg_notify(@channel, @queue) FROM upd)
SELECT (SELECT state::text FROM was), (SELECT token FROM upd), (SELECT updated_at FROM upd),
	(SELECT count(*) FROM n)
