-- Extends the valid ones of the leases @ids, @tokens of @queue to the
-- database's clock + @lease_us microseconds, never shortening one (a
-- heartbeat round of Run or KeepAlive; a single Heartbeat runs
-- lease_heartbeat.sql). Rows another transaction holds are skipped: a
-- round never waits (for a handler's CompleteTx, say). It returns each
-- row it locked: ID, the lease's token, and the new expiry and the
-- instant if it extended the lease (NULL: refused).
WITH l AS (
	SELECT j.queue, j.id, h.token AS held FROM leaserouter_jobs j
	JOIN unnest(@ids::text[], @tokens::bigint[]) AS h(id, token) ON j.id = h.id
	WHERE j.queue = @queue ORDER BY j.id FOR UPDATE OF j SKIP LOCKED),
x AS (
	UPDATE leaserouter_jobs j SET updated_at = clock_timestamp(),
		lease_expires_at = greatest(j.lease_expires_at, clock_timestamp() + @lease_us * interval '1 microsecond')
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, l.held)
	RETURNING j.id, j.token, j.lease_expires_at, j.updated_at)
SELECT l.id, l.held, x.lease_expires_at, x.updated_at FROM l LEFT JOIN x ON x.id = l.id AND x.token = l.held
