-- pgrouter:concurrent-index
-- Undoes version 21: version 3's index of pending jobs is built again,
-- concurrently (writes to the jobs table go on meanwhile).
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_ready ON /*schema*/leaserouter_jobs (queue, priority DESC, ready_at, seq) WHERE (state = 'pending'::/*schema*/leaserouter_job_state);
