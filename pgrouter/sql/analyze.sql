-- Analyzes the jobs table (vacuum.go): its statistics follow its growth,
-- and each connection's plans are made again with them (a plan made
-- while the table was tiny may scan the queue for every row it looks
-- up), without waiting for an ANALYZE or vacuum already running
-- (SKIP_LOCKED). A role that does not own the table gets a warning and
-- nothing is done.
ANALYZE (SKIP_LOCKED) /*schema*/leaserouter_jobs
