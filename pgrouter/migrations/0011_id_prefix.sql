-- pgrouter schema, version 11: List's ID prefix, whatever the database's
-- collation (jobs_list_prefix.sql). Safe to apply again (IF NOT EXISTS).

-- A queue's jobs of one state by ID in byte order (collation "C", the
-- order in which the IDs starting with a prefix are one range, in any
-- database: the primary key's order is the database's collation, where a
-- prefix is a range only under C), with what List filters on, so that a
-- page of a rare prefix reads the IDs that have it, index only, instead
-- of walking the state's jobs. Building it holds off writes to the jobs
-- table while it reads the table (the migration's transaction: CREATE
-- INDEX CONCURRENTLY cannot run in one); on a large table, create it
-- CONCURRENTLY by hand first, under this name: this statement then finds
-- it.
CREATE INDEX IF NOT EXISTS leaserouter_jobs_id ON leaserouter_jobs (queue, state, id COLLATE "C") INCLUDE (seq, purge_at);
