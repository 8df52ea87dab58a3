-- pgrouter:concurrent-index
-- pgrouter schema, version 24: List's ID prefix among the leased jobs. A
-- concurrent index build (see version 11).

-- A queue's leased jobs by ID in byte order (as version 11's), so that a
-- page of a prefix rare among the newest leased jobs reads the leased
-- jobs with the prefix, not every lease in flight. Narrow (no state, no
-- seq, no purge time: a leased job has no purge time, and List reads the
-- seq of the hits only from their rows): the claim writes an entry here
-- where it wrote one in leaserouter_jobs_id, a smaller one. A statement
-- reading it says state = 'leased'.
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_id_leased ON /*schema*/leaserouter_jobs (queue, id COLLATE "C") WHERE (state = 'leased'::/*schema*/leaserouter_job_state);
