-- Undoes version 14: every job's kind and metadata go (a Client's jobs
-- are of kind "" after an upgrade, which a Client does not lease).
DROP TRIGGER IF EXISTS leaserouter_jobs_kind_reset ON /*schema*/leaserouter_jobs;
DROP FUNCTION IF EXISTS /*schema*/leaserouter_jobs_kind_reset();
ALTER TABLE /*schema*/leaserouter_jobs DROP COLUMN IF EXISTS kind_of;
ALTER TABLE /*schema*/leaserouter_jobs DROP COLUMN IF EXISTS metadata;
ALTER TABLE /*schema*/leaserouter_jobs DROP COLUMN IF EXISTS kind;
