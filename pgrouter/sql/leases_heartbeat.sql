-- Extends the valid ones of the leases @ids, @tokens of @queue to the
-- database's clock + @lease_us microseconds, never shortening one (a
-- heartbeat round of Run or KeepAlive; a single Heartbeat runs
-- lease_heartbeat.sql). Rows another transaction holds are skipped: a
-- round never waits (for a handler's CompleteTx, say). Rows are locked
-- in ID order, as in leases_end.sql (and in its shape, for the planner).
-- It returns each row it locked: ID, the lease's token, and the new
-- expiry and the instant if it extended the lease (NULL: refused).
WITH l AS (
	SELECT j.id, h.token AS held, /*schema*/leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, h.token) AS valid
	FROM (SELECT @ids::text[], @tokens::bigint[] OFFSET 0) AS a(ids, tokens),
		LATERAL (SELECT * FROM unnest(a.ids, a.tokens) AS u(id, token) ORDER BY id) AS h,
		LATERAL (SELECT * FROM /*schema*/leaserouter_jobs j WHERE j.queue = @queue AND j.id = h.id FOR UPDATE SKIP LOCKED) AS j),
x AS (
	UPDATE /*schema*/leaserouter_jobs j SET updated_at = clock_timestamp(),
		lease_expires_at = greatest(j.lease_expires_at, clock_timestamp() + @lease_us * interval '1 microsecond')
	FROM l
	WHERE j.queue = @queue AND j.id = l.id AND l.valid
	RETURNING j.id, j.token, j.lease_expires_at, j.updated_at)
SELECT l.id, l.held, x.lease_expires_at, x.updated_at FROM l LEFT JOIN x ON x.id = l.id AND x.token = l.held
