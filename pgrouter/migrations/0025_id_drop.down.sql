-- pgrouter:concurrent-index
-- Undoes version 25: version 11's index is built again, concurrently
-- (writes to the jobs table go on meanwhile).
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_id ON /*schema*/leaserouter_jobs (queue, state, id COLLATE "C") INCLUDE (seq, purge_at);
