-- Undoes version 9: leaserouter_end_lease is version 3's again (a lease
-- ended by 'snoozed' is no longer known to it), and every job's
-- WithTimeout goes.
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
FROM (SELECT reason NOT IN ('completed', 'revoked') AND (permanent OR attempt >= max_attempts) AS dead) d
$$;

ALTER TABLE /*schema*/leaserouter_jobs DROP COLUMN IF EXISTS timeout_of;
ALTER TABLE /*schema*/leaserouter_jobs DROP COLUMN IF EXISTS timeout_us;
