-- pgrouter:concurrent-index
-- pgrouter schema, version 26: List's order and the counts without an
-- index entry at the claim. A concurrent index build (see version 11).

-- Version 6's index, leaserouter_jobs_order (dropped by version 27),
-- without the leased jobs: a claim moves a job from pending to leased, a
-- row version that takes an entry in every index holding it. The leased
-- jobs are listed and counted from the queue's leases in flight instead
-- (leaserouter_jobs_leased, by expiry: a walk of them all, sorted by
-- seq where List needs that order), bounded by the workers of every
-- process. A statement walking this index says state <> 'leased', so
-- that the planner proves the predicate, the generic plan too.
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_order_unleased ON /*schema*/leaserouter_jobs (queue, state, seq) WHERE (state <> 'leased'::/*schema*/leaserouter_job_state);
