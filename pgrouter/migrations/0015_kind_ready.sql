-- pgrouter:concurrent-index
-- pgrouter schema, version 15: the claim's walk, kind by kind. A
-- concurrent index build (see version 11): writes to the jobs table go on
-- while it builds.

-- A queue's pending jobs of one kind in the ready order (priority, ready
-- time, enqueue order): the claim (claim.sql) walks it once per kind its
-- process serves and merges the walks, so a job of a kind no process
-- serving the queue knows is never read, nor leased. An entry is at most
-- a queue name (256 bytes), a kind (leaserouter.MaxIDBytes, 1024) and 24
-- bytes: under the 2704 a btree entry may hold. The index of version 3,
-- leaserouter_jobs_ready, stays while processes of earlier versions may
-- still claim with it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_kind_ready ON leaserouter_jobs (queue, kind, priority DESC, ready_at, seq) WHERE (state = 'pending'::leaserouter_job_state);
