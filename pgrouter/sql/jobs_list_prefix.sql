-- A page of List with an ID prefix: as jobs_list, of the jobs whose ID
-- starts with @prefix (not empty), whatever the database's collation.
-- @end is the least string above every one starting with @prefix in
-- byte order (collation "C"; admin.go's prefixEnd), so those IDs are
-- exactly [@prefix, @end) there; starts_with (no pattern characters)
-- checks each all the same.
--
-- Each state other than leased is found one of two ways, whichever costs
-- less; the leased state, always by its range (below):
--   * walk: the state's newest @walk jobs below @before, newest first
--     (leaserouter_jobs_order_unleased (queue, state, seq) WHERE state
--     <> 'leased', migration 0026, the walk saying state <> 'leased'), of
--     which those with the prefix: enough
--     when @limit of them are found, or when the state has no more jobs
--     than the walk read. A CTE is read as its consumer asks, in the
--     order it was written, so a prefix most jobs have stops the walk
--     after about a page (the count of the walk is asked for only when
--     the hits are too few).
--   * range: otherwise (the prefix is rare among the state's newest
--     jobs; or the state is leased), the state's jobs with the prefix, the newest @limit of them
--     sorted out: its cost is the state's jobs with the prefix. A state
--     other than leased reads them index only from
--     leaserouter_jobs_id_unleased (queue, state, id COLLATE "C")
--     INCLUDE (seq, purge_at) WHERE state <> 'leased' (migration 0023).
--     The leased state's is a walk backward from @before of
--     leaserouter_jobs_leased_seq (queue, seq, id COLLATE "C") WHERE
--     state = 'leased' (migration 0028) with the ID range an index
--     condition on its third column: each entry is checked in the index,
--     only the hits are returned, and the walk stops after @limit of
--     them, already in seq order. Its cost is at most the queue's entries
--     there (the leases in flight and ended leases not yet vacuumed, a
--     few hundred an index page) and the hits' rows. Each range's statement names its index's
--     predicate (state <> 'leased', state = 'leased') for the planner to
--     prove it, and is gated on s.state, so a state's walk runs one
--     range only.
-- The page, the newest @limit of those, is then read whole by the
-- primary key: a page of rows, never the rows walked.
--
-- @omit (ListParams.OmitPayload): payload, progress and errors read as NULL, the
-- columns never read (a CASE whose branch is not taken fetches no TOAST).
WITH page AS MATERIALIZED (
	SELECT x.id, x.seq FROM unnest(@states::text[]::/*schema*/leaserouter_job_state[]) AS s(state),
	LATERAL (
		WITH walk AS MATERIALIZED (
			SELECT id, seq, purge_at FROM /*schema*/leaserouter_jobs
			WHERE s.state <> 'leased' AND queue = @queue AND state = s.state AND state <> 'leased' AND seq < @before
			ORDER BY seq DESC
			LIMIT @walk),
		hits AS MATERIALIZED (
			SELECT id, seq FROM walk
			WHERE starts_with(id, @prefix) AND NOT /*schema*/leaserouter_past_retention(s.state, purge_at)
			LIMIT @limit),
		enough AS MATERIALIZED (
			SELECT s.state <> 'leased' AND ((SELECT count(*) FROM hits) >= @limit OR (SELECT count(*) FROM walk) < @walk) AS yes)
		SELECT id, seq FROM hits WHERE (SELECT yes FROM enough)
		UNION ALL
		(SELECT id, seq FROM /*schema*/leaserouter_jobs
		WHERE NOT (SELECT yes FROM enough) AND s.state <> 'leased'
			AND queue = @queue AND state = s.state AND state <> 'leased'
			AND id COLLATE "C" >= @prefix AND id COLLATE "C" < @end
			AND starts_with(id, @prefix) AND seq < @before
			AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
		ORDER BY seq DESC
		LIMIT @limit)
		UNION ALL
		-- A leased job is never past its retention (it has no purge time).
		-- starts_with is given id || '', an expression no index holds: on
		-- id itself, in a database whose collation is C, the planner
		-- derives from it a range of the primary key (queue, id), every
		-- state's jobs with the prefix, and may prefer that read to the
		-- walk of the leased jobs, which is bounded by the leases in flight
		-- whatever the statistics.
		(SELECT id, seq FROM /*schema*/leaserouter_jobs
		WHERE NOT (SELECT yes FROM enough) AND s.state = 'leased'
			AND queue = @queue AND state = 'leased' AND seq < @before
			AND id COLLATE "C" >= @prefix AND id COLLATE "C" < @end
			AND starts_with(id || '', @prefix)
		ORDER BY seq DESC
		LIMIT @limit)) AS x
	ORDER BY x.seq DESC
	LIMIT @limit)
SELECT j.id, CASE WHEN NOT @omit THEN j.payload END, j.state::text, j.priority, j.attempt, j.max_attempts, j.token,
	j.owner, j.lease_expires_at, j.ready_at, CASE WHEN NOT @omit THEN j.progress END, j.last_error, j.created_at,
	j.updated_at, CASE WHEN j.timeout_of = j.created_at THEN j.timeout_us ELSE 0 END, j.kind,
	j.metadata, CASE WHEN j.state = 'leased' THEN j.leased_at END, CASE WHEN NOT @omit THEN j.errors END, j.seq
FROM page JOIN /*schema*/leaserouter_jobs j ON j.queue = @queue AND j.id = page.id
ORDER BY page.seq DESC
