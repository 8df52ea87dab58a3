-- pgrouter schema, version 9: per-attempt timeouts and snooze. Safe to
-- apply again (IF NOT EXISTS, OR REPLACE); a process of an earlier
-- version keeps working on it (its statements name neither).

-- Each attempt's limit set by WithTimeout (Job.Timeout), in
-- microseconds; 0 when none was given (WorkerOptions.Timeout applies).
-- A constant default: adding the column changes the catalog only (no
-- rewrite of the table, PostgreSQL 11 and later).
ALTER TABLE /*schema*/leaserouter_jobs ADD COLUMN IF NOT EXISTS timeout_us bigint NOT NULL DEFAULT 0;
-- The created_at of the job whose WithTimeout timeout_us is: the
-- statements read timeout_us only where timeout_of = created_at, else 0.
-- A process of an earlier version that replaces a purged job's row sets
-- neither column but a new created_at, so the purged job's timeout does
-- not pass to its job. NULL (no default: a catalog change only) in rows
-- written before this version.
ALTER TABLE /*schema*/leaserouter_jobs ADD COLUMN IF NOT EXISTS timeout_of timestamptz;

-- leaserouter_end_lease of version 3, with one more reason: 'snoozed'
-- (Lease.Snooze) never makes a job dead, whatever its attempts: it is
-- scheduled delay_us after ended_at, or pending at once (ready since
-- ended_at) for 0, not purged, its last error as given (the statement
-- keeps the job's). The statement that snoozes also takes the attempt
-- back (lease_end.sql): the snoozed lease is not counted. The other
-- reasons are unchanged. ended is text: the new reason needs no change
-- of type.
CREATE OR REPLACE FUNCTION /*schema*/leaserouter_end_lease(
	reason text, attempt integer, max_attempts integer, permanent boolean, delay_us bigint,
	ended_at timestamptz, last_error text, retention_us bigint)
RETURNS TABLE (state /*schema*/leaserouter_job_state, ready_at timestamptz, purge_at timestamptz,
	owner text, lease_expires_at timestamptz, ended text, requeued boolean,
	updated_at timestamptz, new_last_error text)
LANGUAGE sql IMMUTABLE
AS $$
SELECT
	CASE WHEN reason = 'completed' THEN 'succeeded'::/*schema*/leaserouter_job_state
		WHEN d.dead THEN 'failed'::/*schema*/leaserouter_job_state
		WHEN delay_us > 0 THEN 'scheduled'::/*schema*/leaserouter_job_state
		ELSE 'pending'::/*schema*/leaserouter_job_state END,
	ended_at + greatest(delay_us, 0) * interval '1 microsecond',
	CASE WHEN reason = 'completed' OR d.dead THEN ended_at + retention_us * interval '1 microsecond' END,
	'',
	NULL::timestamptz,
	reason,
	reason = 'expired' AND NOT d.dead,
	ended_at,
	CASE WHEN d.dead AND reason = 'released' AND last_error = '' THEN 'attempts exhausted'
		ELSE last_error END
FROM (SELECT reason NOT IN ('completed', 'revoked', 'snoozed') AND (permanent OR attempt >= max_attempts) AS dead) d
$$;
