-- Undoes version 19: every job's error history goes (each job's
-- last_error stays).
DROP TRIGGER IF EXISTS leaserouter_jobs_errors_reset ON /*schema*/leaserouter_jobs;
DROP FUNCTION IF EXISTS /*schema*/leaserouter_jobs_errors_reset();
DROP FUNCTION IF EXISTS /*schema*/leaserouter_append_error(jsonb, integer, timestamptz, text, text);
ALTER TABLE /*schema*/leaserouter_jobs DROP COLUMN IF EXISTS errors;
