-- Run by a periodic tick's transaction just before its COMMIT: lifts the
-- bounds periodic_tick set that would also bound the COMMIT's wait for
-- the cluster's NOTIFY lock (the job's insert notifies): lock_timeout
-- and, from PostgreSQL 17, transaction_timeout (an unknown setting
-- before it, so set only there). Behind another transaction's notifying
-- commit slow to be durable, the tick's COMMIT would fail where an
-- Enqueue's waits.
SELECT set_config('lock_timeout', '0', true),
	CASE WHEN current_setting('server_version_num')::int >= 170000
		THEN set_config('transaction_timeout', '0', true) END
