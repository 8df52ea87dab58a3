-- Ends the valid ones of the leases @ids, @tokens (job IDs and tokens) of
-- @queue, each for @reason: 'completed' (Run's completions) or 'revoked'
-- (Close); leaserouter_end_lease (migration 0003) says where the job
-- goes, as it does for a single lease's end (lease_end.sql). The rows are
-- locked in ID order first (the order every statement locks several rows
-- in, so two never deadlock); each lease is then checked with its row
-- locked (leaserouter_lease_valid) and ended, or left as it is. It
-- returns each lease ended: ID, token, the state it left, the instant;
-- with @accept_ended, a lease ended for @reason already (by an earlier
-- statement whose reply was lost) too, with the instant it ended, so a
-- retry of an unknown outcome is not a refusal.
WITH l AS (
	SELECT j.queue, j.id, h.token AS held, j.state AS was, j.token AS had, j.ended AS why, j.updated_at AS at
	FROM leaserouter_jobs j
	JOIN unnest(@ids::text[], @tokens::bigint[]) AS h(id, token) ON j.id = h.id
	WHERE j.queue = @queue ORDER BY j.id FOR UPDATE OF j),
x AS (
	UPDATE leaserouter_jobs j SET
		(state, ready_at, purge_at, owner, lease_expires_at, ended, requeued, updated_at, last_error) =
			(SELECT * FROM leaserouter_end_lease(@reason, j.attempt, j.max_attempts, false, 0,
				c.now, j.last_error, @retention_us))
	FROM l, LATERAL (SELECT clock_timestamp() AS now) c -- read after l's row is locked
	WHERE j.queue = l.queue AND j.id = l.id AND leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, l.held)
	RETURNING j.id, j.token, j.state, j.updated_at)
SELECT id, token, state::text, updated_at FROM x
UNION ALL
SELECT id, held, was::text, at FROM l WHERE @accept_ended AND had = held AND was <> 'leased' AND why = @reason
