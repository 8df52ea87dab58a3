-- pgrouter:concurrent-index
-- pgrouter schema, version 11: List's ID prefix, whatever the database's
-- collation (jobs_list_prefix.sql). A concurrent index build (migrate.go's
-- concurrentMarker): built outside a transaction, writes to the jobs
-- table going on meanwhile; an INVALID one (a failed build) is dropped
-- and built again.

-- A queue's jobs of one state by ID in byte order (collation "C", the
-- order in which the IDs starting with a prefix are one range, in any
-- database: the primary key's order is the database's collation, where
-- they need not be one: under ICU's, say, "B" sorts between "a" and "c"
-- and punctuation is ignored at first), with what List filters on, so
-- that a page of a rare prefix reads the IDs that have it, index only,
-- instead of walking the state's jobs.
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_id ON /*schema*/leaserouter_jobs (queue, state, id COLLATE "C") INCLUDE (seq, purge_at);
