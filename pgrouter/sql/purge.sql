-- Deletes up to @limit finished jobs of @queue past their retention,
-- oldest first, skipping rows other transactions hold, and returns each:
-- ID, token, attempt, purge time. One purge of a queue runs at a time,
-- whatever the number of processes: a purge that finds another one in
-- flight (the transaction-scoped advisory lock on the pair
-- (1886745127, hashtext(@queue)) taken: a key space of two int4s, apart
-- from the claims' bigint keys) deletes nothing, and its maintenance
-- round ends; the purge in flight goes on until its batches are no longer
-- full. Purges walking each other's locked rows from the same end of the
-- purge index cost half as much again per row deleted with 4 processes.
WITH d AS (
	DELETE FROM leaserouter_jobs j
	USING (SELECT queue, id FROM leaserouter_jobs
		WHERE queue = @queue AND leaserouter_past_retention(state, purge_at)
			AND (SELECT pg_try_advisory_xact_lock(1886745127, hashtext(@queue)))
		ORDER BY purge_at LIMIT @limit FOR UPDATE SKIP LOCKED) p
	WHERE j.queue = p.queue AND j.id = p.id
	RETURNING j.id, j.token, j.attempt, j.purge_at)
SELECT id, token, attempt, purge_at FROM d
