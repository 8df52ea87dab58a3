-- pgrouter:concurrent-index
-- pgrouter schema, version 17: List by kind without an index write at
-- the claim. A concurrent index build (see version 11).

-- Version 16's index, leaserouter_jobs_kind_order (dropped by version
-- 18), without the leased jobs: a claim moves a job from pending to
-- leased, and each index holding the new row version costs the claim an
-- entry (a Client's job paid one in it at its claim and one at its end
-- that a Router's job of kind "" does not). The leased jobs of a kind
-- are listed by a walk of the queue's leased jobs in
-- leaserouter_jobs_order (queue, state, seq), filtering the kind: a walk
-- bounded by the leases in flight. A statement walking this index says
-- both kind <> '' and state <> 'leased', so that the planner proves the
-- predicate, the generic plan too.
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_kind_list ON /*schema*/leaserouter_jobs (queue, kind, state, seq) WHERE ((kind <> ''::text) AND (state <> 'leased'::/*schema*/leaserouter_job_state));
