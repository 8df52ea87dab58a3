-- A page of List of some kinds: as jobs_list, of the jobs whose kind is
-- one of @kinds (not empty, "" not among them) or, if @unkinded, ""; and
-- whose ID starts with @prefix ("" for every ID; compared byte by byte,
-- starts_with).
--
-- Each pair of a state and a kind of @kinds is a walk backward of
-- leaserouter_jobs_kind_order (queue, kind, state, seq) WHERE kind <> ''
-- (migration 0016), and kind "" a walk of each state's
-- leaserouter_jobs_order (queue, state, seq) that skips the jobs of
-- other kinds; each stops after @limit rows with the prefix, and the
-- page is the newest @limit of those: a sort of at most six times @limit
-- rows per kind, never of the queue. With a prefix, a walk reads its
-- kind's jobs of the state until it has found a page of them with it.
--
-- @omit (ListParams.OmitPayload): payload and progress read as NULL, the
-- columns never read (metadata is read: at most MaxMetadataBytes).
SELECT * FROM (
	SELECT j.* FROM unnest(@states::text[]::leaserouter_job_state[]) AS s(state), unnest(@kinds::text[]) AS k(kind),
	LATERAL (
		SELECT id, CASE WHEN NOT @omit THEN payload END, state::text, priority, attempt, max_attempts, token, owner,
			lease_expires_at, ready_at, CASE WHEN NOT @omit THEN progress END, last_error, created_at, updated_at,
			CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END AS timeout_us, kind, metadata, seq
		FROM leaserouter_jobs
		WHERE queue = @queue AND kind = k.kind AND kind <> '' AND state = s.state AND seq < @before
			AND starts_with(id, @prefix)
			AND NOT leaserouter_past_retention(state, purge_at)
		ORDER BY seq DESC
		LIMIT @limit) AS j
	UNION ALL
	SELECT j.* FROM unnest(@states::text[]::leaserouter_job_state[]) AS s(state),
	LATERAL (
		SELECT id, CASE WHEN NOT @omit THEN payload END, state::text, priority, attempt, max_attempts, token, owner,
			lease_expires_at, ready_at, CASE WHEN NOT @omit THEN progress END, last_error, created_at, updated_at,
			CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END AS timeout_us, kind, metadata, seq
		FROM leaserouter_jobs
		WHERE @unkinded AND queue = @queue AND kind = '' AND state = s.state AND seq < @before
			AND starts_with(id, @prefix)
			AND NOT leaserouter_past_retention(state, purge_at)
		ORDER BY seq DESC
		LIMIT @limit) AS j) AS page
ORDER BY page.seq DESC
LIMIT @limit
