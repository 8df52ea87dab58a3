-- Deletes up to @limit finished jobs of @queue past their retention,
-- oldest first, skipping rows other transactions hold, and returns each:
-- ID, token, attempt, purge time.
WITH d AS (
	DELETE FROM leaserouter_jobs j
	USING (SELECT queue, id FROM leaserouter_jobs
		WHERE queue = @queue AND leaserouter_past_retention(state, purge_at)
		ORDER BY purge_at LIMIT @limit FOR UPDATE SKIP LOCKED) p
	WHERE j.queue = p.queue AND j.id = p.id
	RETURNING j.id, j.token, j.attempt, j.purge_at)
SELECT id, token, attempt, purge_at FROM d
