-- Extends lease @token of job @id of @queue, if valid, to the database's
-- clock + @lease_us microseconds, never shortening it; with
-- @set_progress, stores @progress as the job's checkpoint. Heartbeat runs
-- it after locking the row (lease_lock.sql) in the same transaction. It
-- returns one row, as lease_end.sql does: ID, token, whether it extended
-- the lease, the state, the new expiry and the instant; and the row as
-- found: token, state, why its latest lease ended.
WITH upd AS (
	UPDATE /*schema*/leaserouter_jobs j SET updated_at = clock_timestamp(),
		lease_expires_at = greatest(j.lease_expires_at, clock_timestamp() + @lease_us * interval '1 microsecond'),
		progress = CASE WHEN @set_progress THEN @progress::bytea ELSE j.progress END
	WHERE j.queue = @queue AND j.id = @id AND /*schema*/leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, @token)
	RETURNING j.state, j.lease_expires_at, j.updated_at)
SELECT @id::text, @token::bigint, EXISTS (SELECT FROM upd), (SELECT state::text FROM upd),
	(SELECT lease_expires_at FROM upd), (SELECT updated_at FROM upd), j.token, j.state::text, j.ended
FROM (SELECT) one LEFT JOIN /*schema*/leaserouter_jobs j ON j.queue = @queue AND j.id = @id
