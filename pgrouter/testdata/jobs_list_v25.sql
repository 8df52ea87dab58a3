-- A page of List without an ID prefix (jobs_list_prefix has one): up to
-- @limit jobs of @queue whose enqueue order (seq) is below @before (the
-- cursor's; the largest bigint for a first page), newest first, in the
-- states @states (their names), finished ones while retained.
--
-- Each state is a walk backward of leaserouter_jobs_order (queue, state,
-- seq) that stops after @limit rows (the state a parameter of the
-- lateral subquery: its index order is seq's), and the page is the
-- newest @limit of those: a sort of at most six times @limit rows, never
-- of the queue. (A UNION ALL of one branch per state is planned as a
-- sort of every selected row: a branch's own state equality does not
-- make the index's order seq's to the merge above it.)
--
-- @omit (ListParams.OmitPayload): payload, progress and errors read as NULL, the
-- columns never read (a CASE whose branch is not taken fetches no TOAST).
SELECT j.* FROM unnest(@states::text[]::/*schema*/leaserouter_job_state[]) AS s(state),
LATERAL (
	SELECT id, CASE WHEN NOT @omit THEN payload END, state::text, priority, attempt, max_attempts, token, owner,
		lease_expires_at, ready_at, CASE WHEN NOT @omit THEN progress END, last_error, created_at, updated_at,
		CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END AS timeout_us, kind,
		metadata, CASE WHEN state = 'leased' THEN leased_at END, CASE WHEN NOT @omit THEN errors END, seq
	FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND state = s.state AND seq < @before
		AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
	ORDER BY seq DESC
	LIMIT @limit) AS j
ORDER BY j.seq DESC
LIMIT @limit
