-- Run by a periodic tick's transaction just before its COMMIT: lifts the
-- lock_timeout periodic_tick set, which would also bound the COMMIT's
-- wait for the cluster's NOTIFY lock (the job's insert notifies): behind
-- another transaction's notifying commit slow to be durable, the tick's
-- COMMIT would fail where an Enqueue's waits.
SELECT set_config('lock_timeout', '0', true)
