-- Ends the leases claim @claim granted on @queue that are still leased
-- (valid or past their expiry but not settled): pending again in their
-- old place with the attempt not counted, as leases_hand_back.sql does,
-- and the claim id cleared (the rows no longer show a lease of the
-- claim: a retry of the resolver finds nothing). It returns how many.
WITH l AS (
	SELECT queue, id FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND state = 'leased' AND claim = @claim ORDER BY id FOR UPDATE),
b AS (
	UPDATE /*schema*/leaserouter_jobs j SET (state, attempt, owner, lease_expires_at, ended) =
			(SELECT * FROM /*schema*/leaserouter_hand_back(j.attempt, j.requeued)),
		updated_at = clock_timestamp(), claim = NULL
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND j.state = 'leased' AND j.claim = @claim
	RETURNING 1)
SELECT count(*) FROM b
