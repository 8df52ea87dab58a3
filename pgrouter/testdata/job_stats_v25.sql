-- Counts @queue's jobs by state, finished ones while retained: one row
-- per state (all six), with its count and whether that count is
-- estimated. A state is counted exactly when it has at most @cap jobs: a
-- walk of leaserouter_jobs_order (queue, state, seq) from the state's
-- oldest job, index only where the visibility map allows, that stops
-- after @cap + 1 entries. ORDER BY seq makes it the index's walk: without
-- it, a scan of the table stopping at @cap + 1 matches was planned, which
-- reads the whole table for a queue whose jobs lie at its end. A state
-- with more is estimated by the planner (leaserouter_count_estimate,
-- migration 0008), never below the @cap + 1 jobs found. @cap NULL: every
-- state counted exactly (LIMIT NULL is no limit), however long it takes.
--
-- Finished jobs past their retention (leaserouter_past_retention, the
-- instant read once) are found apart, by a walk of leaserouter_jobs_purge
-- in purge_at order that stops after @cap + 1 of them (without the ORDER
-- BY: a bitmap scan of them all), and taken off their state's count (the
-- maintenance loop purges them: normally there are few); with more than
-- @cap of them, the finished states' counts are estimated too (those
-- found taken off). The order index holds no purge_at: testing the rule
-- in the walk would read every finished job's row.
WITH past AS MATERIALIZED (
	SELECT state FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND /*schema*/leaserouter_past_retention(state, purge_at)
		AND purge_at <= (SELECT clock_timestamp())
	ORDER BY purge_at LIMIT @cap + 1),
past_all AS (SELECT count(*) AS n FROM past)
SELECT s.state::text,
	CASE WHEN n.n > @cap THEN greatest(/*schema*/leaserouter_count_estimate(@queue, s.state), n.n) ELSE n.n END - p.n,
	coalesce(n.n > @cap OR s.state >= 'succeeded' AND (SELECT n FROM past_all) > @cap, false)
FROM unnest(enum_range(NULL::/*schema*/leaserouter_job_state)) AS s(state),
	LATERAL (SELECT count(*) AS n FROM (SELECT FROM /*schema*/leaserouter_jobs j
		WHERE j.queue = @queue AND j.state = s.state ORDER BY j.seq LIMIT @cap + 1) w) n,
	LATERAL (SELECT count(*) AS n FROM past WHERE past.state = s.state) p
