-- A page of @queue's leased jobs, the lease expiring soonest first, ties
-- in enqueue order, after the lease of key (@after_at, @after_seq) (the
-- previous page's last; a first page passes an instant before every
-- lease): up to @limit rows, with the columns of a job as Get reads them
-- but payload, progress and errors (NULL: the page shows none), and seq. A
-- walk of leaserouter_jobs_leased (queue, lease_expires_at) from
-- @after_at, whatever the page's number; the leases of one expiry
-- instant are sorted by seq (an incremental sort: leases granted by one
-- claim share their expiry, so at most a claim's batch, 1024, at once).
SELECT id, NULL::jsonb, state::text, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
	NULL::bytea, last_error, created_at, updated_at, CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END,
	kind, metadata, leased_at, NULL::jsonb, seq
FROM /*schema*/leaserouter_jobs
WHERE queue = @queue AND state = 'leased' AND lease_expires_at >= @after_at
	AND (lease_expires_at, seq) > (@after_at, @after_seq)
ORDER BY lease_expires_at, seq
LIMIT @limit
