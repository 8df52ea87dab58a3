-- A page of List with an ID prefix: as jobs_list, of the jobs whose ID
-- starts with @prefix (not empty), whatever the database's collation.
-- @end is the least string above every one starting with @prefix in
-- byte order (collation "C"; admin.go's prefixEnd), so those IDs are
-- exactly [@prefix, @end) there; starts_with (no pattern characters)
-- checks each all the same.
--
-- Each state is found one of two ways, whichever costs less:
--   * walk: for each of the state's kinds (found as jobs_list finds
--     them), its newest jobs below @before, walked backward in
--     leaserouter_jobs_list (queue, state, kind, seq) until @limit of
--     them have the prefix or the walk has read its share of @walk
--     (@walk shared out among the kinds, at least @limit a kind). Each
--     kind's walk knows the kind's jobs with the prefix above a seq
--     (its above: the oldest of its hits when it found @limit, the
--     oldest job read when it stopped at its share, -1 when it read the
--     kind's every job); the state's jobs with the prefix above the
--     highest of those are all known, and enough when @limit of them
--     are found, or when every walk read its kind's every job. For a
--     queue of one kind (a queue of Routers: kind "") that is one walk,
--     stopping after about a page when most jobs have the prefix. A CTE
--     is read as its consumer asks, in the order it was written, and a
--     CASE evaluates only the branch it takes: a walk whose hits are
--     enough is not counted.
--   * range: otherwise (the prefix is rare among the state's newest
--     jobs), the state's jobs with the prefix, from the index
--     leaserouter_jobs_id (queue, state, id COLLATE "C") INCLUDE (seq,
--     purge_at) (migration 0011), read index only, the newest @limit of
--     them sorted out: its cost is the state's jobs with the prefix.
-- The page, the newest @limit of those, is then read whole by the
-- primary key: a page of rows, never the rows walked.
--
-- @omit (ListParams.OmitPayload): payload and progress read as NULL, the
-- columns never read (a CASE whose branch is not taken fetches no TOAST).
WITH page AS MATERIALIZED (
	SELECT x.id, x.seq FROM unnest(@states::text[]::leaserouter_job_state[]) AS s(state),
	LATERAL (
		WITH RECURSIVE kinds(kind) AS (
			(SELECT kind FROM leaserouter_jobs WHERE queue = @queue AND state = s.state ORDER BY kind LIMIT 1)
			UNION ALL
			SELECT (SELECT n.kind FROM leaserouter_jobs n WHERE n.queue = @queue AND n.state = s.state AND n.kind > k.kind
				ORDER BY n.kind LIMIT 1)
			FROM kinds k WHERE k.kind IS NOT NULL),
		share AS MATERIALIZED (
			SELECT greatest(@limit, @walk / nullif(count(kind), 0)) AS n FROM kinds),
		found AS MATERIALIZED (
			SELECT f.* FROM kinds k,
			LATERAL (
				WITH walk AS MATERIALIZED (
					SELECT id, seq, purge_at FROM leaserouter_jobs
					WHERE queue = @queue AND state = s.state AND kind = k.kind AND seq < @before
					ORDER BY seq DESC
					LIMIT (SELECT n FROM share)),
				hits AS MATERIALIZED (
					SELECT id, seq FROM walk
					WHERE starts_with(id, @prefix) AND NOT leaserouter_past_retention(s.state, purge_at)
					LIMIT @limit),
				known AS MATERIALIZED (
					SELECT CASE WHEN (SELECT count(*) FROM hits) >= @limit THEN (SELECT min(seq) FROM hits)
						WHEN (SELECT count(*) FROM walk) < (SELECT n FROM share) THEN -1
						ELSE (SELECT min(seq) FROM walk) END AS above)
				SELECT id, seq, (SELECT above FROM known) AS above FROM hits
				UNION ALL
				SELECT NULL, NULL, (SELECT above FROM known)) AS f
			WHERE k.kind IS NOT NULL),
		known AS MATERIALIZED (
			SELECT coalesce(max(above), -1) AS above FROM found),
		hits AS MATERIALIZED (
			SELECT id, seq FROM found
			WHERE id IS NOT NULL AND seq >= (SELECT above FROM known)
			ORDER BY seq DESC
			LIMIT @limit),
		enough AS MATERIALIZED (
			SELECT (SELECT count(*) FROM hits) >= @limit OR (SELECT above FROM known) < 0 AS yes)
		SELECT id, seq FROM hits WHERE (SELECT yes FROM enough)
		UNION ALL
		(SELECT id, seq FROM leaserouter_jobs
		WHERE NOT (SELECT yes FROM enough)
			AND queue = @queue AND state = s.state
			AND id COLLATE "C" >= @prefix AND id COLLATE "C" < @end
			AND starts_with(id, @prefix) AND seq < @before
			AND NOT leaserouter_past_retention(state, purge_at)
		ORDER BY seq DESC
		LIMIT @limit)) AS x
	ORDER BY x.seq DESC
	LIMIT @limit)
SELECT j.id, CASE WHEN NOT @omit THEN j.payload END, j.state::text, j.priority, j.attempt, j.max_attempts, j.token,
	j.owner, j.lease_expires_at, j.ready_at, CASE WHEN NOT @omit THEN j.progress END, j.last_error, j.created_at,
	j.updated_at, CASE WHEN j.timeout_of = j.created_at THEN j.timeout_us ELSE 0 END, j.kind,
	j.metadata, j.seq
FROM page JOIN leaserouter_jobs j ON j.queue = @queue AND j.id = page.id
ORDER BY page.seq DESC
