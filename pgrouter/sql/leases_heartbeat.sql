-- Extends the valid ones of the leases @ids, @tokens of @queue to the
-- database's clock + @lease_us microseconds, never shortening one; with
-- @set_progress, stores @progress as the job's checkpoint. Rows another
-- transaction holds are skipped (a heartbeat round never waits: one held
-- by a handler's CompleteTx, say); a single Heartbeat, a batch of one,
-- has locked its row first in the same transaction (lease_lock.sql), so
-- its row is never skipped. It returns, as leases_end.sql does, a row per
-- lease whose row it locked: ID, token, whether it was extended, the
-- state, the new expiry and the instant; and the row as found: token,
-- state, why its latest lease ended.
WITH l AS (
	SELECT j.queue, j.id, h.token AS held, j.state AS was, j.token AS had, j.ended AS why
	FROM leaserouter_jobs j
	JOIN unnest(@ids::text[], @tokens::bigint[]) AS h(id, token) ON j.id = h.id
	WHERE j.queue = @queue ORDER BY j.id FOR UPDATE OF j SKIP LOCKED),
x AS (
	UPDATE leaserouter_jobs j SET updated_at = clock_timestamp(),
		lease_expires_at = greatest(j.lease_expires_at, clock_timestamp() + @lease_us * interval '1 microsecond'),
		progress = CASE WHEN @set_progress THEN @progress::bytea ELSE j.progress END
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, l.held)
	RETURNING j.id, j.token, j.state, j.lease_expires_at, j.updated_at)
SELECT l.id, l.held, x.id IS NOT NULL, x.state::text, x.lease_expires_at, x.updated_at, l.had, l.was::text, l.why
FROM l LEFT JOIN x ON x.id = l.id AND x.token = l.held
