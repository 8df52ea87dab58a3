-- pgrouter schema, version 19: each job's error history (Job.Errors).
-- Safe to apply again (IF NOT EXISTS, OR REPLACE, the trigger created
-- only where it is missing); a process of an earlier version keeps
-- working on it (its statements name none of it: its failures and
-- expiries set last_error and leave no record, and the trigger below
-- clears the history of a purged job its insert replaces).

-- The records of the job's failed attempts, oldest first, at most the
-- most recent 25 (leaserouter.MaxAttemptErrors): a JSON array of
-- objects {"attempt", "at", "worker", "error"}; NULL for none (every job
-- written before this version: their last_error stays, with no record).
-- No default: adding the column changes the catalog only (no rewrite of
-- the table; a constant default would too, PostgreSQL 11 and later), and
-- a job that never fails stores nothing (a NULL is a bit of the row's
-- null bitmap), so the writes of a successful job are the same size.
ALTER TABLE /*schema*/leaserouter_jobs ADD COLUMN IF NOT EXISTS errors jsonb;

-- errors with the record of a failed attempt appended, then cut to its
-- last 25 elements: what every statement that records a failure (a
-- lease ended 'failed', an expiry settled) sets errors to, in the
-- statement that sets last_error. STABLE, not IMMUTABLE: a timestamptz
-- in JSON is written in the session's time zone (the instant is the
-- same in any).
CREATE OR REPLACE FUNCTION /*schema*/leaserouter_append_error(
	errors jsonb, attempt integer, at timestamptz, worker text, error text)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
SELECT jsonb_path_query_array(
	coalesce(errors, '[]'::jsonb)
		|| jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', at, 'worker', worker, 'error', error)),
	'$[last - 24 to last]')
$$;

-- A purged job's row that an insert replaces (jobs_insert.sql) starts
-- with no history, as its last_error starts empty. This version's insert
-- says so itself; an insert of an earlier version sets created_at but
-- not errors (only the inserts' upserts set created_at), which would
-- pass the purged job's history to the new job: the trigger clears it
-- there.
CREATE OR REPLACE FUNCTION /*schema*/leaserouter_jobs_errors_reset() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	NEW.errors := NULL;
	RETURN NEW;
END
$$;

-- Created once: CREATE TRIGGER takes the table's SHARE ROW EXCLUSIVE
-- lock (held by the migration's transaction for a moment: Migrate's
-- lock_timeout and retries apply).
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgname = 'leaserouter_jobs_errors_reset'
			AND tgrelid = '/*schema*/leaserouter_jobs'::regclass) THEN
		CREATE TRIGGER leaserouter_jobs_errors_reset
			BEFORE UPDATE OF created_at ON /*schema*/leaserouter_jobs
			FOR EACH ROW
			WHEN (NEW.errors IS NOT NULL AND NEW.created_at IS DISTINCT FROM OLD.created_at)
			EXECUTE FUNCTION /*schema*/leaserouter_jobs_errors_reset();
	END IF;
END
$$;
