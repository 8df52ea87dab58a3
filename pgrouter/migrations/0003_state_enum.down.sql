-- Undoes version 3: the functions go, and the state column is numbers
-- again (leaserouter.State's values), its partial indexes made again for
-- them. The rewrite of the table holds its lock until the migration
-- commits, as version 3's did.
DROP FUNCTION IF EXISTS /*schema*/leaserouter_end_lease(text, integer, integer, boolean, bigint, timestamptz, text, bigint);
DROP FUNCTION IF EXISTS /*schema*/leaserouter_lease_valid(/*schema*/leaserouter_job_state, bigint, timestamptz, bigint);
DROP FUNCTION IF EXISTS /*schema*/leaserouter_past_retention(/*schema*/leaserouter_job_state, timestamptz);

DROP INDEX IF EXISTS /*schema*/leaserouter_jobs_ready;
DROP INDEX IF EXISTS /*schema*/leaserouter_jobs_scheduled;
DROP INDEX IF EXISTS /*schema*/leaserouter_jobs_leased;
DROP INDEX IF EXISTS /*schema*/leaserouter_jobs_purge;

ALTER TABLE /*schema*/leaserouter_jobs ALTER COLUMN state TYPE smallint USING (CASE state
	WHEN 'pending' THEN 0
	WHEN 'scheduled' THEN 1
	WHEN 'leased' THEN 2
	WHEN 'succeeded' THEN 3
	WHEN 'failed' THEN 4
	WHEN 'canceled' THEN 5
END);

CREATE INDEX leaserouter_jobs_ready ON /*schema*/leaserouter_jobs (queue, priority DESC, ready_at, seq) WHERE state = 0;
CREATE INDEX leaserouter_jobs_scheduled ON /*schema*/leaserouter_jobs (queue, ready_at) WHERE state = 1;
CREATE INDEX leaserouter_jobs_leased ON /*schema*/leaserouter_jobs (queue, lease_expires_at) WHERE state = 2;
CREATE INDEX leaserouter_jobs_purge ON /*schema*/leaserouter_jobs (queue, purge_at) WHERE state >= 3;

DROP TYPE IF EXISTS /*schema*/leaserouter_job_state;
