-- A page of List of some kinds: as jobs_list, of the jobs whose kind is
-- one of @kinds ("" not among them; empty when only "" is asked) or, if
-- @unkinded, ""; and
-- whose ID starts with @prefix ("" for every ID; compared byte by byte,
-- starts_with).
--
-- Each pair of a state other than leased and a kind of @kinds is a walk
-- backward of leaserouter_jobs_kind_list (queue, kind, state, seq) WHERE
-- kind <> '' AND state <> 'leased' (migration 0017: the walk says both,
-- so the planner proves the predicate); kind "" a walk of each state's
-- leaserouter_jobs_order_unleased (queue, state, seq) WHERE state <>
-- 'leased' (migration 0026: the walk says state <> 'leased' too) that
-- skips the jobs of other kinds; the leased jobs of @kinds (and of "" if
-- @unkinded) one read of the queue's leased jobs, which skips the jobs
-- of other kinds: a walk backward of leaserouter_jobs_leased_seq (queue,
-- seq, id) WHERE state = 'leased' (migration 0028) that stops after
-- @limit of them, or a read of leaserouter_jobs_leased by expiry sorted
-- by seq, whichever the planner finds cheaper (either bounded by the
-- leases in flight; a claim writes no entry in a kind's index nor in the
-- order index). Each stops after
-- @limit rows with the prefix, and the page is the newest @limit of
-- those: a sort of at most six times @limit rows per kind, never of the
-- queue. With a prefix, a walk reads its kind's jobs of the state until
-- it has found a page of them with it.
--
-- @omit (ListParams.OmitPayload): payload, progress and errors read as NULL, the
-- columns never read (metadata is read: at most MaxMetadataBytes).
SELECT * FROM (
	SELECT j.* FROM unnest(@states::text[]::/*schema*/leaserouter_job_state[]) AS s(state), unnest(@kinds::text[]) AS k(kind),
	LATERAL (
		SELECT id, CASE WHEN NOT @omit THEN payload END, state::text, priority, attempt, max_attempts, token, owner,
			lease_expires_at, ready_at, CASE WHEN NOT @omit THEN progress END, last_error, created_at, updated_at,
			CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END AS timeout_us, kind, metadata, CASE WHEN state = 'leased' THEN leased_at END,
			CASE WHEN NOT @omit THEN errors END, seq
		FROM /*schema*/leaserouter_jobs
		WHERE queue = @queue AND kind = k.kind AND kind <> '' AND state = s.state AND state <> 'leased'
			AND seq < @before AND starts_with(id, @prefix)
			AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
		ORDER BY seq DESC
		LIMIT @limit) AS j
	UNION ALL
	(SELECT id, CASE WHEN NOT @omit THEN payload END, state::text, priority, attempt, max_attempts, token, owner,
		lease_expires_at, ready_at, CASE WHEN NOT @omit THEN progress END, last_error, created_at, updated_at,
		CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END AS timeout_us, kind, metadata, CASE WHEN state = 'leased' THEN leased_at END,
			CASE WHEN NOT @omit THEN errors END, seq
	FROM /*schema*/leaserouter_jobs
	WHERE 'leased' = ANY(@states::text[]) AND (cardinality(@kinds::text[]) > 0 OR @unkinded)
		AND queue = @queue AND state = 'leased' AND (kind = ANY(@kinds::text[]) OR @unkinded AND kind = '')
		AND seq < @before AND starts_with(id, @prefix)
	ORDER BY seq DESC
	LIMIT @limit)
	UNION ALL
	SELECT j.* FROM unnest(@states::text[]::/*schema*/leaserouter_job_state[]) AS s(state),
	LATERAL (
		SELECT id, CASE WHEN NOT @omit THEN payload END, state::text, priority, attempt, max_attempts, token, owner,
			lease_expires_at, ready_at, CASE WHEN NOT @omit THEN progress END, last_error, created_at, updated_at,
			CASE WHEN timeout_of = created_at THEN timeout_us ELSE 0 END AS timeout_us, kind, metadata, CASE WHEN state = 'leased' THEN leased_at END,
			CASE WHEN NOT @omit THEN errors END, seq
		FROM /*schema*/leaserouter_jobs
		WHERE @unkinded AND queue = @queue AND kind = '' AND state = s.state AND state <> 'leased' AND seq < @before
			AND starts_with(id, @prefix)
			AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
		ORDER BY seq DESC
		LIMIT @limit) AS j) AS page
ORDER BY page.seq DESC
LIMIT @limit
