-- pgrouter schema, version 18: version 16's index goes, replaced by
-- version 17's. Every write of a Client's job paid an entry in it. A
-- process of version 16 or 17 still lists by kind and checks Drained
-- correctly without it, through the indexes that remain. DROP INDEX
-- takes the table's ACCESS EXCLUSIVE lock for a moment: Migrate's
-- lock_timeout and retries apply.
DROP INDEX IF EXISTS leaserouter_jobs_kind_order;
