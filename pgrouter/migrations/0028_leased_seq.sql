-- pgrouter:concurrent-index
-- pgrouter schema, version 28: the leased jobs in List's order, with
-- their IDs. A concurrent index build (see version 11).

-- A queue's leased jobs by seq, each with its ID in byte order (as
-- version 11's), replacing version 24's leaserouter_jobs_id_leased
-- (queue, id COLLATE "C") (dropped by version 29): a claim writes an
-- entry here where it wrote one there. List's leased page is a walk of
-- it backward from its cursor that stops after a page, not a sort of
-- every lease in flight; List's ID-prefix page reads the leased jobs with
-- the prefix walking it backward, the ID range checked on each index
-- entry (its rows fetched only for the hits), and stops after a page of
-- them: its cost is the queue's leased index entries at most, bounded by
-- the workers of every process. A statement reading it says state =
-- 'leased'.
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_leased_seq ON /*schema*/leaserouter_jobs (queue, seq, id COLLATE "C") WHERE (state = 'leased'::/*schema*/leaserouter_job_state);
