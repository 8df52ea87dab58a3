-- pgrouter:concurrent-index
-- Undoes version 29: version 24's index is built again, concurrently
-- (writes to the jobs table go on meanwhile).
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_id_leased ON /*schema*/leaserouter_jobs (queue, id COLLATE "C") WHERE (state = 'leased'::/*schema*/leaserouter_job_state);
