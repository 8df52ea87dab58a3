-- Counts every queue's jobs by state, finished ones while retained, as
-- job_stats.sql counts one queue's (with @cap; NULL: exactly): a row per
-- queue and state it has jobs in (finished ones while retained), with the
-- count and whether it is estimated. The queues are found by a skip scan
-- of the primary key (queue, id): a probe per queue for the next one,
-- never a read of the table; then each is counted as job_stats.sql
-- counts it, so the time grows with the number of queues (about a Stats
-- each), not with their jobs; a queue's leased jobs are counted from its
-- leases in flight (leaserouter_jobs_leased), as job_stats.sql does.
WITH RECURSIVE found(queue) AS (
	(SELECT queue FROM /*schema*/leaserouter_jobs ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT j.queue FROM /*schema*/leaserouter_jobs j WHERE j.queue > f.queue ORDER BY j.queue LIMIT 1)
	FROM found f WHERE f.queue IS NOT NULL),
q AS MATERIALIZED (SELECT queue FROM found WHERE queue IS NOT NULL),
past AS MATERIALIZED (
	SELECT q.queue, l.state FROM q,
		LATERAL (SELECT j.state FROM /*schema*/leaserouter_jobs j
			WHERE j.queue = q.queue AND /*schema*/leaserouter_past_retention(j.state, j.purge_at)
				AND j.purge_at <= (SELECT clock_timestamp())
			ORDER BY j.purge_at LIMIT @cap + 1) l),
past_state AS (SELECT queue, state, count(*) AS n FROM past GROUP BY queue, state),
past_all AS (SELECT queue, count(*) AS n FROM past GROUP BY queue)
SELECT * FROM (
	SELECT q.queue, s.state::text,
		CASE WHEN n.n > @cap THEN greatest(/*schema*/leaserouter_count_estimate(q.queue, s.state), n.n) ELSE n.n END
			- coalesce(ps.n, 0) AS n,
		coalesce(n.n > @cap OR s.state >= 'succeeded' AND pa.n > @cap, false) AS estimated
	FROM q CROSS JOIN unnest(enum_range(NULL::/*schema*/leaserouter_job_state)) AS s(state)
		CROSS JOIN LATERAL (SELECT count(*) AS n FROM (
			(SELECT FROM /*schema*/leaserouter_jobs j
			WHERE s.state <> 'leased' AND j.queue = q.queue AND j.state = s.state AND j.state <> 'leased'
			ORDER BY j.seq LIMIT @cap + 1)
			UNION ALL
			(SELECT FROM /*schema*/leaserouter_jobs j
			WHERE s.state = 'leased' AND j.queue = q.queue AND j.state = 'leased'
			ORDER BY j.lease_expires_at LIMIT @cap + 1)) w) n
		LEFT JOIN past_state ps ON ps.queue = q.queue AND ps.state = s.state
		LEFT JOIN past_all pa ON pa.queue = q.queue) c
WHERE n > 0 OR estimated
