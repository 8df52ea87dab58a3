-- Locks the rows of the jobs of @queue named in @ids, in ID order (the
-- order every statement locks several rows in, so two never deadlock),
-- waiting for those another transaction holds, and settles the expired
-- leases among them as settle_expired.sql settles a queue's (the same
-- leaserouter_end_lease with reason 'expired', as of the expiry instant,
-- recorded in the job's error history),
-- judged once each row is locked: a lease whose holder was acting on it
-- when a settling round skipped it is settled here if it is still past
-- its expiry. It returns settle_expired.sql's columns for each job it
-- settled. RetryMany, CancelMany and DeleteMany (and Retry, Cancel and
-- Delete) run it first in the transaction of their statement
-- (jobs_retry, jobs_cancel, jobs_delete), which then finds the rows
-- locked already and judges each job as the expiry left it.
WITH l AS (
	SELECT j.id, j.owner, j.lease_expires_at,
		j.state = 'leased' AND j.lease_expires_at <= clock_timestamp() AS expired
	FROM (SELECT @ids::text[] OFFSET 0) AS a(ids),
		LATERAL (SELECT DISTINCT u.id FROM unnest(a.ids) AS u(id) ORDER BY u.id) AS h,
		LATERAL (SELECT * FROM /*schema*/leaserouter_jobs j WHERE j.queue = @queue AND j.id = h.id FOR UPDATE) AS j)
UPDATE /*schema*/leaserouter_jobs j SET
	(state, ready_at, purge_at, owner, lease_expires_at, ended, requeued, updated_at, last_error) =
		(SELECT * FROM /*schema*/leaserouter_end_lease('expired', j.attempt, j.max_attempts, false, 0,
			j.lease_expires_at, 'lease expired', @retention_us)),
		errors = /*schema*/leaserouter_append_error(j.errors, j.attempt, j.lease_expires_at, j.owner, 'lease expired')
FROM l
WHERE j.queue = @queue AND j.id = l.id AND l.expired
RETURNING j.id, j.token, j.attempt, j.state::text, l.lease_expires_at, l.owner, j.leased_at
