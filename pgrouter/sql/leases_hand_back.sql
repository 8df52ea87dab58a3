-- Ends the valid ones of the leases @ids, @tokens of @queue that Run
-- granted ahead of their turn and never started: pending again with the
-- ready time (and requeued flag, and so the reason its previous lease
-- ended) they had before, which a claim leaves as they were, and the
-- lease not counted as an attempt: as if never granted. Rows are locked
-- in ID order first, as in leases_end.sql. It returns each lease handed
-- back: ID, token, instant.
WITH l AS (
	SELECT j.queue, j.id, h.token AS held
	FROM leaserouter_jobs j
	JOIN unnest(@ids::text[], @tokens::bigint[]) AS h(id, token) ON j.id = h.id
	WHERE j.queue = @queue ORDER BY j.id FOR UPDATE OF j)
UPDATE leaserouter_jobs j SET state = 'pending', attempt = j.attempt - 1, owner = '', lease_expires_at = NULL,
	ended = CASE WHEN j.requeued THEN 'expired' ELSE 'released' END, updated_at = clock_timestamp()
FROM l
WHERE j.queue = l.queue AND j.id = l.id AND leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, l.held)
RETURNING j.id, j.token, j.updated_at
