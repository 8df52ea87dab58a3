-- Deletes up to @limit finished jobs of @queue past their retention,
-- oldest first, skipping rows other transactions hold, and returns each:
-- ID, token, attempt, purge time. One purge of a queue runs at a time,
-- whatever the number of processes: a purge that finds another one in
-- flight (the transaction-scoped advisory lock on the pair
-- (1886745127, hashtext('/*schema*/' || @queue)) taken: a key space of
-- two int4s, apart from the claims' bigint keys; the schema's marker in
-- the string makes it the queue's of this schema, and is '' in the
-- default schema, whose key is the queue's as before schemas) deletes
-- nothing, and its maintenance
-- round ends; the purge in flight goes on until its batches are no longer
-- full. Purges of one queue at once would walk each other's locked rows
-- from the same end of the purge index.
--
-- The repeated bound on purge_at, with the instant read once, is one the
-- index can take: the walk starts at the oldest and stops after @limit
-- rows (with only the rule's own test, a bitmap scan of every finished
-- row of the queue, dead entries included, then a sort, was chosen).
-- The rows reach the delete as an array (p), estimated at a few rows
-- whatever @limit (u.id > '', true of every ID, lowers the estimate
-- further, as n.token > 0 does in claim.sql), so it finds each by key
-- (joined to the locked rows directly, it could hash the whole queue at
-- every batch).
WITH p AS (
	SELECT array_agg(id) AS ids FROM (SELECT id FROM /*schema*/leaserouter_jobs
		WHERE queue = @queue AND /*schema*/leaserouter_past_retention(state, purge_at)
			AND purge_at <= (SELECT clock_timestamp())
			AND (SELECT pg_try_advisory_xact_lock(1886745127, hashtext('/*schema*/' || @queue)))
		ORDER BY purge_at LIMIT @limit FOR UPDATE SKIP LOCKED) l),
d AS (
	DELETE FROM /*schema*/leaserouter_jobs j
	USING p, unnest(p.ids) AS u(id)
	WHERE j.queue = @queue AND j.id = u.id AND u.id > ''
	RETURNING j.id, j.token, j.attempt, j.purge_at)
SELECT id, token, attempt, purge_at FROM d
