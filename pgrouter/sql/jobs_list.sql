-- A page of List without an ID prefix (jobs_list_prefix has one): up to
-- @limit jobs of @queue whose enqueue order (seq) is below @before (the
-- cursor's; the largest bigint for a first page), newest first, in the
-- states @states (their names), finished ones while retained.
--
-- Each state other than leased is a walk backward of
-- leaserouter_jobs_order_unleased (queue, state, seq) WHERE state <>
-- 'leased' (migration 0026: the walk says state <> 'leased', so that the
-- planner proves the predicate, the generic plan too) that stops after
-- @limit rows (the state a parameter of the lateral subquery: its index
-- order is seq's). The leased state, when asked, is a walk backward of
-- leaserouter_jobs_leased_seq (queue, seq, id COLLATE "C") WHERE state =
-- 'leased' (migration 0028; the walk says state = 'leased') from @before
-- that stops after @limit rows: never a sort of the leases in flight (a
-- claim writes its entry there, none in the order index). The page is
-- the newest @limit of those: a sort of at most six times @limit rows,
-- never of the queue. (A UNION
-- ALL of one branch per state is planned as a sort of every selected
-- row: a branch's own state equality does not make the index's order
-- seq's to the merge above it.)
--
-- @omit (ListParams.OmitPayload): payload, progress and errors read as NULL, the
-- columns never read (a CASE whose branch is not taken fetches no TOAST).
SELECT * FROM (
	SELECT j.* FROM unnest(@states::text[]::/*schema*/leaserouter_job_state[]) AS s(state),
	LATERAL (
		SELECT id, CASE WHEN NOT @omit THEN payload END, state::text, priority, attempt, max_attempts, token, owner,
			lease_expires_at, ready_at, CASE WHEN NOT @omit THEN progress END, last_error, created_at, updated_at,
			CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END AS timeout_us, kind,
			metadata, CASE WHEN state = 'leased' THEN leased_at END, CASE WHEN NOT @omit THEN errors END, seq
		FROM /*schema*/leaserouter_jobs
		WHERE queue = @queue AND state = s.state AND state <> 'leased' AND seq < @before
			AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
		ORDER BY seq DESC
		LIMIT @limit) AS j
	UNION ALL
	-- A leased job is never past its retention (it has no purge time).
	(SELECT id, CASE WHEN NOT @omit THEN payload END, state::text, priority, attempt, max_attempts, token, owner,
		lease_expires_at, ready_at, CASE WHEN NOT @omit THEN progress END, last_error, created_at, updated_at,
		CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END AS timeout_us, kind,
		metadata, leased_at, CASE WHEN NOT @omit THEN errors END, seq
	FROM /*schema*/leaserouter_jobs
	WHERE 'leased' = ANY(@states::text[]) AND queue = @queue AND state = 'leased' AND seq < @before
	ORDER BY seq DESC
	LIMIT @limit)) AS page
ORDER BY page.seq DESC
LIMIT @limit
