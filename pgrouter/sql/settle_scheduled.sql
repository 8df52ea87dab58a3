-- Makes @queue's scheduled jobs whose run-at has come pending, at most
-- @limit, with their run-at as ready time, and returns how many.
WITH sch AS (
	UPDATE leaserouter_jobs j SET state = 'pending', updated_at = j.ready_at
	FROM (SELECT queue, id FROM leaserouter_jobs
		WHERE queue = @queue AND state = 'scheduled' AND ready_at <= (SELECT clock_timestamp())
		ORDER BY ready_at LIMIT @limit FOR UPDATE SKIP LOCKED) d
	WHERE j.queue = d.queue AND j.id = d.id
	RETURNING 1)
SELECT count(*) FROM sch
