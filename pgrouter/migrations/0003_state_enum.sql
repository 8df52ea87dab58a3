-- pgrouter schema, version 3: the state column readable in SQL, and the
-- rules every lease statement shares, written once, as functions the
-- statements call.

-- A job's state: the labels are leaserouter.State's names, in its order
-- (so comparisons follow the core's order too). A test pins them.
CREATE TYPE /*schema*/leaserouter_job_state AS ENUM ('pending', 'scheduled', 'leased', 'succeeded', 'failed', 'canceled');

-- The partial indexes name states in their predicates: made again for the
-- new type. The conversion rewrites the table (it holds the table's lock
-- until the migration commits; Migrate waits for a moment when no
-- transaction holds it). A state outside 0..5 (none is ever written)
-- fails the migration, which then changes nothing.
DROP INDEX /*schema*/leaserouter_jobs_ready;
DROP INDEX /*schema*/leaserouter_jobs_scheduled;
DROP INDEX /*schema*/leaserouter_jobs_leased;
DROP INDEX /*schema*/leaserouter_jobs_purge;

ALTER TABLE /*schema*/leaserouter_jobs ALTER COLUMN state TYPE /*schema*/leaserouter_job_state USING (CASE state
	WHEN 0 THEN 'pending'
	WHEN 1 THEN 'scheduled'
	WHEN 2 THEN 'leased'
	WHEN 3 THEN 'succeeded'
	WHEN 4 THEN 'failed'
	WHEN 5 THEN 'canceled'
END)::/*schema*/leaserouter_job_state;

CREATE INDEX leaserouter_jobs_ready ON /*schema*/leaserouter_jobs (queue, priority DESC, ready_at, seq) WHERE state = 'pending';
CREATE INDEX leaserouter_jobs_scheduled ON /*schema*/leaserouter_jobs (queue, ready_at) WHERE state = 'scheduled';
CREATE INDEX leaserouter_jobs_leased ON /*schema*/leaserouter_jobs (queue, lease_expires_at) WHERE state = 'leased';
CREATE INDEX leaserouter_jobs_purge ON /*schema*/leaserouter_jobs (queue, purge_at) WHERE state IN ('succeeded', 'failed', 'canceled');

-- A finished job past its retention (purge_at <= clock_timestamp(), the
-- database's clock at this moment) is as good as purged: Get, Cancel and
-- Stats do not see it, an Enqueue of its ID replaces it, the maintenance
-- loop deletes it. A plain SQL expression, VOLATILE as clock_timestamp()
-- is, so the planner inlines it: the statements' plans are those of the
-- expression written out (purge.sql still proves leaserouter_jobs_purge's
-- predicate and walks it in purge_at order).
CREATE FUNCTION /*schema*/leaserouter_past_retention(st /*schema*/leaserouter_job_state, purge_at timestamptz) RETURNS boolean
LANGUAGE sql VOLATILE
AS $$ SELECT st IN ('succeeded', 'failed', 'canceled') AND purge_at <= clock_timestamp() $$;

-- The one invariant: a lease (its token, held) is valid iff the job's row
-- has that token, is leased, and its expiry is after clock_timestamp()
-- (the database's clock at this moment, never the transaction's start).
-- Every lease statement calls it with the row locked. A plain SQL
-- expression, VOLATILE as clock_timestamp() is: the planner inlines it.
CREATE FUNCTION /*schema*/leaserouter_lease_valid(
	st /*schema*/leaserouter_job_state, tok bigint, expires_at timestamptz, held bigint) RETURNS boolean
LANGUAGE sql VOLATILE
AS $$ SELECT st = 'leased' AND tok = held AND expires_at > clock_timestamp() $$;

-- How a lease ends, and where its job goes: every end of a lease
-- (completed, failed, released, revoked by Close, expired) leaves the row
-- through this one rule, as the core's endLease does. The job is
--   succeeded when the lease completed;
--   dead (failed) when it failed with a Permanent error, or its attempts
--     are used up (attempt >= max_attempts), unless Close revoked the
--     lease: a revoked job is pending again at once even on its last
--     attempt, as in the core (Close's doing, not the job's);
--   otherwise ready again: scheduled delay_us after ended_at when delay_us > 0
--     (a failure's backoff), else pending at once, ready since ended_at.
-- A finished job is purged retention_us after ended_at. The lease's traces go:
-- no owner, no expiry; ended says why (a leaserouter.LostReason), ended_at
-- is the instant of the change (for an expiry, the expiry instant itself);
-- requeued marks a job ready again because its lease expired. The job's
-- last error becomes last_error, or 'attempts exhausted' for a job that a
-- release made dead without an error of its own.
-- Use: UPDATE ... SET (state, ready_at, purge_at, owner, lease_expires_at,
-- ended, requeued, updated_at, last_error) = (SELECT * FROM
-- leaserouter_end_lease(...)). It returns one row; declared as a table
-- function (and IMMUTABLE) so that the planner inlines it into the
-- statement, as it does no other function in a FROM list: planning its
-- body again at each call costs more than the rest of the statement.
CREATE FUNCTION /*schema*/leaserouter_end_lease(
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
FROM (SELECT reason NOT IN ('completed', 'revoked') AND (permanent OR attempt >= max_attempts) AS dead) d
$$;
