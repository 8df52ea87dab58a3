-- pgrouter schema, version 8: counts at scale (Stats, Queues: counts.go).
-- A state with more jobs than Stats counts one by one is estimated from
-- the planner's statistics, which ANALYZE keeps (the Router's maintenance
-- loop, vacuum.go, and autovacuum). Safe to apply again (IF NOT EXISTS,
-- OR REPLACE).

-- The joint distribution of queue and state (the most common pairs and
-- their frequencies, from ANALYZE's sample): without it the planner takes
-- them for independent, and estimates a queue's jobs in a state as the
-- table's rows times the queue's share times the state's share, wrong by
-- orders of magnitude when queues differ (one mostly finished, another
-- mostly pending). Only statistics: no index, no lock held long.
CREATE STATISTICS IF NOT EXISTS /*schema*/leaserouter_jobs_queue_state (mcv) ON queue, state FROM /*schema*/leaserouter_jobs;

-- The planner's estimate of the jobs of queue q in state st (finished
-- ones past their retention included): the rows of EXPLAIN's plan of the
-- selection, planned with q and st known (so the statistics above apply;
-- the table's rows are scaled to its current size, as the planner does).
-- A plan, not a scan: well under a millisecond at any size. VOLATILE: a
-- function that runs EXPLAIN cannot be declared otherwise.
CREATE OR REPLACE FUNCTION /*schema*/leaserouter_count_estimate(q text, st /*schema*/leaserouter_job_state) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
	plan json;
BEGIN
	EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM /*schema*/leaserouter_jobs WHERE queue = $1 AND state = $2'
		INTO plan USING q, st;
	RETURN (plan->0->'Plan'->>'Plan Rows')::bigint;
END
$$;
