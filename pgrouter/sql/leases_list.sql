-- Up to @limit leased jobs of @queue, the lease expiring soonest first
-- (the index of leased jobs by expiry, leaserouter_jobs_leased), with
-- the columns of a job as Get reads them (kind and metadata included) but
-- payload, progress and errors (NULL:
-- the page shows neither, and reading them costs their size).
SELECT id, NULL::jsonb, state::text, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
	NULL::bytea, last_error, created_at, updated_at, CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END,
	kind, metadata, leased_at, NULL::jsonb
FROM /*schema*/leaserouter_jobs
WHERE queue = @queue AND state = 'leased'
ORDER BY lease_expires_at, seq
LIMIT @limit
