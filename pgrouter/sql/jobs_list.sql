-- A page of List: up to @limit jobs of @queue whose enqueue order (seq)
-- is below @before (the cursor's; the largest bigint for a first page),
-- newest first, in the states of @mask (bit s: leaserouter.State s) and
-- with IDs starting with @prefix ('' for all), finished ones while
-- retained. One branch per state, each an index walk backward on
-- leaserouter_jobs_order (queue, state, seq) that the merge stops at the
-- page's end (a branch whose bit is clear is cut by its one-time filter):
-- no sort of the queue, one plan for every filter. The prefix is tested
-- on the rows walked (starts_with: no LIKE metacharacters, any
-- collation), so a prefix that few of the selected jobs have walks past
-- the others.
SELECT id, payload, state::text, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
	progress, last_error, created_at, updated_at, seq
FROM (
	SELECT id, payload, state, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
		progress, last_error, created_at, updated_at, seq FROM leaserouter_jobs
	WHERE queue = @queue AND state = 'pending' AND seq < @before AND starts_with(id, @prefix)
		AND @mask::integer & 1 <> 0
	UNION ALL
	SELECT id, payload, state, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
		progress, last_error, created_at, updated_at, seq FROM leaserouter_jobs
	WHERE queue = @queue AND state = 'scheduled' AND seq < @before AND starts_with(id, @prefix)
		AND @mask::integer & 2 <> 0
	UNION ALL
	SELECT id, payload, state, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
		progress, last_error, created_at, updated_at, seq FROM leaserouter_jobs
	WHERE queue = @queue AND state = 'leased' AND seq < @before AND starts_with(id, @prefix)
		AND @mask::integer & 4 <> 0
	UNION ALL
	SELECT id, payload, state, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
		progress, last_error, created_at, updated_at, seq FROM leaserouter_jobs
	WHERE queue = @queue AND state = 'succeeded' AND seq < @before AND starts_with(id, @prefix)
		AND @mask::integer & 8 <> 0 AND NOT leaserouter_past_retention(state, purge_at)
	UNION ALL
	SELECT id, payload, state, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
		progress, last_error, created_at, updated_at, seq FROM leaserouter_jobs
	WHERE queue = @queue AND state = 'failed' AND seq < @before AND starts_with(id, @prefix)
		AND @mask::integer & 16 <> 0 AND NOT leaserouter_past_retention(state, purge_at)
	UNION ALL
	SELECT id, payload, state, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
		progress, last_error, created_at, updated_at, seq FROM leaserouter_jobs
	WHERE queue = @queue AND state = 'canceled' AND seq < @before AND starts_with(id, @prefix)
		AND @mask::integer & 32 <> 0 AND NOT leaserouter_past_retention(state, purge_at)
) j
ORDER BY seq DESC
LIMIT @limit
