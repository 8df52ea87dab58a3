-- Undoes version 4: the instant of each job's latest grant goes.
ALTER TABLE /*schema*/leaserouter_jobs DROP COLUMN IF EXISTS leased_at;
