-- Reads job @id of @queue, unless it is finished and past its retention
-- (as good as purged).
SELECT id, payload, state::text, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
	progress, last_error, created_at, updated_at, CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END,
	kind, metadata, CASE WHEN state = 'leased' THEN leased_at END, errors
FROM /*schema*/leaserouter_jobs
WHERE queue = @queue AND id = @id
	AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
