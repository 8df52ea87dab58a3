-- Undoes version 8: the count estimate and its statistics go.
DROP FUNCTION IF EXISTS /*schema*/leaserouter_count_estimate(text, /*schema*/leaserouter_job_state);
DROP STATISTICS IF EXISTS /*schema*/leaserouter_jobs_queue_state;
