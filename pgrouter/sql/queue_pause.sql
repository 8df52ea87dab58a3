-- Marks @queue paused (@paused true) or not, for every process: the claim
-- statement grants nothing for a paused queue. A resume notifies
-- @channel (with the change, so only if it commits), so that waiters in
-- every process claim at once.
WITH up AS (
	INSERT INTO /*schema*/leaserouter_queues AS q (queue, paused, updated_at) VALUES (@queue, @paused, clock_timestamp())
	ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
	RETURNING 1),
n AS (SELECT pg_notify(@channel, @queue) FROM up WHERE NOT @paused::boolean)
SELECT (SELECT count(*) FROM up), (SELECT count(*) FROM n)
