-- A page of List without an ID prefix or kinds (jobs_list_prefix and
-- jobs_list_kinds have them): up to @limit jobs of @queue whose enqueue
-- order (seq) is below @before (the cursor's; the largest bigint for a
-- first page), newest first, in the states @states (their names),
-- finished ones while retained.
--
-- Each pair of a state and a kind is a walk backward of
-- leaserouter_jobs_list (queue, state, kind, seq) that stops after
-- @limit rows (the state and kind parameters of the lateral subqueries:
-- the index order is then seq's), and the page is the newest @limit of
-- those: a sort of at most @limit rows per state and kind, never of the
-- queue. A state's kinds are found by a skip over the same index (the
-- recursive kinds: the least kind above the last one found, one descent
-- each, index only), so a queue whose jobs have no kind walks one kind
-- a state. (A UNION ALL of one branch per state is planned as a sort of
-- every selected row: a branch's own state equality does not make the
-- index's order seq's to the merge above it.)
--
-- @omit (ListParams.OmitPayload): payload and progress read as NULL, the
-- columns never read (a CASE whose branch is not taken fetches no TOAST).
SELECT j.* FROM unnest(@states::text[]::leaserouter_job_state[]) AS s(state),
LATERAL (
	WITH RECURSIVE kinds(kind) AS (
		(SELECT kind FROM leaserouter_jobs WHERE queue = @queue AND state = s.state ORDER BY kind LIMIT 1)
		UNION ALL
		SELECT (SELECT n.kind FROM leaserouter_jobs n WHERE n.queue = @queue AND n.state = s.state AND n.kind > k.kind
			ORDER BY n.kind LIMIT 1)
		FROM kinds k WHERE k.kind IS NOT NULL)
	SELECT w.* FROM kinds k,
	LATERAL (
		SELECT id, CASE WHEN NOT @omit THEN payload END, state::text, priority, attempt, max_attempts, token, owner,
			lease_expires_at, ready_at, CASE WHEN NOT @omit THEN progress END, last_error, created_at, updated_at,
			CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END AS timeout_us, kind,
			metadata, seq
		FROM leaserouter_jobs
		WHERE queue = @queue AND state = s.state AND kind = k.kind AND seq < @before
			AND NOT leaserouter_past_retention(state, purge_at)
		ORDER BY seq DESC
		LIMIT @limit) AS w) AS j
ORDER BY j.seq DESC
LIMIT @limit
