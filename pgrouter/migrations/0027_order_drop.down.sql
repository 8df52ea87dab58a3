-- pgrouter:concurrent-index
-- Undoes version 27: version 6's index is built again, concurrently
-- (writes to the jobs table go on meanwhile).
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_order ON /*schema*/leaserouter_jobs (queue, state, seq);
