-- Makes @queue's scheduled jobs whose run-at has come pending, at most
-- @limit, with their run-at as ready time, and returns how many. The rows
-- reach the update as an array (d), found by key (see purge.sql).
WITH d AS (
	SELECT array_agg(id) AS ids FROM (SELECT id FROM /*schema*/leaserouter_jobs
		WHERE queue = @queue AND state = 'scheduled' AND ready_at <= (SELECT clock_timestamp())
		ORDER BY ready_at LIMIT @limit FOR UPDATE SKIP LOCKED) l),
sch AS (
	UPDATE /*schema*/leaserouter_jobs j SET state = 'pending', updated_at = j.ready_at
	FROM d, unnest(d.ids) AS u(id)
	WHERE j.queue = @queue AND j.id = u.id AND u.id > ''
	RETURNING 1)
SELECT count(*) FROM sch
