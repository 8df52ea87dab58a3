-- Adds @process's counts of @queue per minute (the arrays: the minute as
-- Unix minutes, then completions, failed attempts, deaths, expiries,
-- stale refusals, each in the same order) to leaserouter_history, and
-- deletes the queue's rows older than two hours on the database's clock.
WITH added AS (
	INSERT INTO /*schema*/leaserouter_history AS h (queue, minute, process, completed, failed, dead, expired, stale)
	SELECT @queue, to_timestamp(m * 60), @process, c, f, d, e, s
	FROM unnest(@minutes::bigint[], @completed::bigint[], @failed::bigint[], @dead::bigint[],
		@expired::bigint[], @stale::bigint[]) AS u(m, c, f, d, e, s)
	ON CONFLICT (queue, minute, process) DO UPDATE SET
		completed = h.completed + excluded.completed, failed = h.failed + excluded.failed,
		dead = h.dead + excluded.dead, expired = h.expired + excluded.expired, stale = h.stale + excluded.stale
	RETURNING 1)
DELETE FROM /*schema*/leaserouter_history
WHERE queue = @queue AND minute < clock_timestamp() - interval '2 hours'
