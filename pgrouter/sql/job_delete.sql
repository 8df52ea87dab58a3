-- Deletes job @id of @queue unless it is leased: its row goes, so its ID
-- may be enqueued again. It returns the job's state before (NULL if the
-- queue does not know it: a finished job past its retention is not
-- known) and, if it was deleted now, its token, attempt and the instant.
WITH was AS (
	SELECT state FROM leaserouter_jobs
	WHERE queue = @queue AND id = @id AND NOT leaserouter_past_retention(state, purge_at)
	FOR UPDATE),
d AS (
	DELETE FROM leaserouter_jobs j USING was
	WHERE j.queue = @queue AND j.id = @id AND was.state <> 'leased'
	RETURNING j.token, j.attempt)
SELECT (SELECT state::text FROM was), (SELECT token FROM d), (SELECT attempt FROM d), clock_timestamp()
