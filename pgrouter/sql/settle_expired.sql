-- Settles @queue's expired leases at the database's clock, at most @limit,
-- oldest first, as of their expiry instant (leaserouter_end_lease with
-- reason 'expired'): each job is pending again, ready since its expiry,
-- or dead when its attempts are used up (purged @retention_us
-- microseconds after the expiry), the expiry recorded in its error
-- history (attempt, expiry instant, holder, 'lease expired'). Rows another transaction holds are
-- skipped (their holder is acting on them). It returns each job settled:
-- ID, token, attempt, new state, expiry, holder, grant instant (NULL for
-- a lease granted before schema version 4). The rows reach the update as
-- arrays (e), found by key (see purge.sql).
WITH e AS (
	SELECT array_agg(id) AS ids, array_agg(owner) AS owners, array_agg(lease_expires_at) AS expiries
	FROM (SELECT id, owner, lease_expires_at FROM /*schema*/leaserouter_jobs
		WHERE queue = @queue AND state = 'leased' AND lease_expires_at <= (SELECT clock_timestamp())
		ORDER BY lease_expires_at LIMIT @limit FOR UPDATE SKIP LOCKED) l)
UPDATE /*schema*/leaserouter_jobs j SET
	(state, ready_at, purge_at, owner, lease_expires_at, ended, requeued, updated_at, last_error) =
		(SELECT * FROM /*schema*/leaserouter_end_lease('expired', j.attempt, j.max_attempts, false, 0,
			j.lease_expires_at, 'lease expired', @retention_us)),
		errors = /*schema*/leaserouter_append_error(j.errors, j.attempt, j.lease_expires_at, j.owner, 'lease expired')
FROM e, unnest(e.ids, e.owners, e.expiries) AS d(id, owner, lease_expires_at)
WHERE j.queue = @queue AND j.id = d.id AND d.id > ''
RETURNING j.id, j.token, j.attempt, j.state::text, d.lease_expires_at, d.owner, j.leased_at
