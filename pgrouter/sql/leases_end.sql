-- Ends the valid ones of the leases @ids, @tokens (job IDs and tokens) of
-- @queue, each for @reason: 'completed', 'failed', 'released' or
-- 'revoked' (leaserouter_end_lease, migration 0003, says where the job
-- goes), with @error as the job's last error (NULL keeps the job's), and
-- for a failure @permanent and the backoff @delay_us. Every end a holder
-- or Close gives a lease goes through this one statement: a single
-- lease's Complete, Fail, Release or CompleteTx is a batch of one, Run's
-- completions and Close's revocation are batches.
--
-- The rows that still have the leases' tokens are locked in ID order
-- first (the order every statement locks several rows in, so two never
-- deadlock; a superseded lease's row is never locked, so a stale caller
-- never waits for, nor blocks, the valid holder); each lease is then
-- checked with its row locked (leaserouter_lease_valid) and ended, or
-- left as it is. A resolvable operation (@op, not 0: see outcome.go) acts only if it
-- was not marked abandoned. It returns a row per lease whose job's row
-- exists: ID, the lease's token, whether it ended now (or, with
-- @accept_ended, had ended for @reason already: an earlier statement
-- whose reply was lost), the state it left and the instant, no expiry;
-- and the row as it was found (with its lock held, if it had the
-- lease's token): token, state, why its latest lease ended.
WITH h AS (SELECT * FROM unnest(@ids::text[], @tokens::bigint[]) AS h(id, token)),
l AS (
	SELECT j.queue, j.id, h.token AS held, j.state AS was, j.ended AS why, j.updated_at AS at
	FROM leaserouter_jobs j JOIN h ON j.id = h.id AND j.token = h.token
	WHERE j.queue = @queue ORDER BY j.id FOR UPDATE OF j),
x AS (
	UPDATE leaserouter_jobs j SET
		(state, ready_at, purge_at, owner, lease_expires_at, ended, requeued, updated_at, last_error) =
			(SELECT * FROM leaserouter_end_lease(@reason, j.attempt, j.max_attempts, @permanent, @delay_us,
				clock_timestamp(), coalesce(@error, j.last_error), @retention_us))
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, l.held)
		AND NOT EXISTS (SELECT FROM leaserouter_abandoned_claims WHERE id = @op)
	RETURNING j.id, j.token, j.state, j.updated_at)
SELECT h.id, h.token,
	x.id IS NOT NULL OR coalesce(@accept_ended AND l.was <> 'leased' AND l.why = @reason, false),
	coalesce(x.state, l.was, j.state)::text, NULL::timestamptz, coalesce(x.updated_at, l.at),
	coalesce(l.held, j.token), coalesce(l.was, j.state)::text, coalesce(l.why, j.ended)
FROM h JOIN leaserouter_jobs j ON j.queue = @queue AND j.id = h.id
LEFT JOIN l ON l.id = h.id AND l.held = h.token
LEFT JOIN x ON x.id = h.id AND x.token = h.token
