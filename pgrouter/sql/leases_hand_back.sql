-- Ends the valid ones of the leases @ids, @tokens of @queue that Run
-- granted ahead of their turn and never started: pending again with the
-- ready time (and requeued flag, and so the reason its previous lease
-- ended) they had before, which a claim leaves as they were, and the
-- lease not counted as an attempt: as if never granted. Rows are locked
-- in ID order first, as in leases_end.sql (and in its shape, for the
-- planner). It returns each lease handed back: ID, token, instant.
-- {lock} is the row lock, rendered waiting and skipping, as in
-- leases_end.sql.
WITH l AS (
	SELECT j.id, clock_timestamp() AS now, /*schema*/leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, h.token) AS valid
	FROM (SELECT @ids::text[], @tokens::bigint[] OFFSET 0) AS a(ids, tokens),
		LATERAL (SELECT * FROM unnest(a.ids, a.tokens) AS u(id, token) ORDER BY id) AS h,
		LATERAL (SELECT * FROM /*schema*/leaserouter_jobs j WHERE j.queue = @queue AND j.id = h.id {lock}) AS j)
UPDATE /*schema*/leaserouter_jobs j SET (state, attempt, owner, lease_expires_at, ended) =
	(SELECT * FROM /*schema*/leaserouter_hand_back(j.attempt, j.requeued)), updated_at = l.now
FROM l
WHERE j.queue = @queue AND j.id = l.id AND l.valid
RETURNING j.id, j.token, j.updated_at
