-- pgrouter:concurrent-index
-- Undoes version 26, concurrently (reads and writes of the jobs table go
-- on meanwhile).
DROP INDEX CONCURRENTLY IF EXISTS /*schema*/leaserouter_jobs_order_unleased;
