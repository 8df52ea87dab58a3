-- pgrouter schema, version 14: a job's kind and metadata. Safe to apply
-- again (IF NOT EXISTS, OR REPLACE, the trigger created only where it is
-- missing); a process of an earlier version keeps working on it (its
-- statements name none of the new columns, and what it inserts gets kind
-- '' and no metadata, the kind of its own jobs).

-- The job's kind (Options.Kind of the Router that enqueued it, or the
-- kind a Client registered): a claim takes only the kinds its process
-- serves. '' for every job written before this version. A constant
-- default: adding the column changes the catalog only (no rewrite of the
-- table, PostgreSQL 11 and later).
ALTER TABLE /*schema*/leaserouter_jobs ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT '';
-- WithMetadata's pairs, a JSON object of strings; NULL for none.
ALTER TABLE /*schema*/leaserouter_jobs ADD COLUMN IF NOT EXISTS metadata jsonb;
-- The created_at of the job whose kind and metadata these are: every
-- insert of this version sets it to the job's created_at. A process of
-- an earlier version that replaces a purged job's row (its upsert,
-- jobs_insert.sql) sets a new created_at but neither kind nor metadata,
-- which would pass the purged job's to its job: its kind routes the job
-- to a handler of another payload type. The trigger below resets them
-- there. NULL (no default: a catalog change only) in rows written before
-- this version.
ALTER TABLE /*schema*/leaserouter_jobs ADD COLUMN IF NOT EXISTS kind_of timestamptz;

-- Unlike timeout_of (version 9), checked where the column is read, the
-- kind is a key of the index the claim walks (version 15), so it is kept
-- right in the row: an update that sets created_at (only the inserts'
-- upserts do; claims, lease operations and Retry never) without setting
-- kind_of to it is an older process's insert, whose job has kind '' and
-- no metadata.
CREATE OR REPLACE FUNCTION /*schema*/leaserouter_jobs_kind_reset() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	NEW.kind := '';
	NEW.metadata := NULL;
	RETURN NEW;
END
$$;

-- Created once: CREATE TRIGGER takes the table's SHARE ROW EXCLUSIVE
-- lock (held by the migration's transaction for a moment: Migrate's
-- lock_timeout and retries apply).
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgname = 'leaserouter_jobs_kind_reset'
			AND tgrelid = '/*schema*/leaserouter_jobs'::regclass) THEN
		CREATE TRIGGER leaserouter_jobs_kind_reset
			BEFORE UPDATE OF created_at ON /*schema*/leaserouter_jobs
			FOR EACH ROW
			WHEN (NEW.kind_of IS DISTINCT FROM NEW.created_at AND (NEW.kind <> '' OR NEW.metadata IS NOT NULL))
			EXECUTE FUNCTION /*schema*/leaserouter_jobs_kind_reset();
	END IF;
END
$$;
