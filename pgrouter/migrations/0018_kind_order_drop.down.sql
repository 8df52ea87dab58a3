-- pgrouter:concurrent-index
-- Undoes version 18: version 16's index is built again, concurrently
-- (writes to the jobs table go on meanwhile).
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_kind_order ON /*schema*/leaserouter_jobs (queue, kind, state, seq) WHERE (kind <> ''::text);
