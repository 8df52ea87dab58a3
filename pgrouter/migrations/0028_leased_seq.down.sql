-- pgrouter:concurrent-index
-- Undoes version 28, concurrently (reads and writes of the jobs table go
-- on meanwhile).
DROP INDEX CONCURRENTLY IF EXISTS /*schema*/leaserouter_jobs_leased_seq;
