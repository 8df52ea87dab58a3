-- Vacuums the jobs table (vacuum.go), removing its dead tuples and their
-- index entries (INDEX_CLEANUP ON: even when few pages have any, which
-- autovacuum may leave for later), and analyzes it (a plan a connection
-- keeps was made with the statistics of its time: new ones make it plan
-- again), without waiting for a vacuum already running (SKIP_LOCKED: it
-- returns at once) and without truncating the table's empty end
-- (TRUNCATE false: that takes a lock every statement on the table would
-- wait for). Not in a transaction: sent alone, in the simple protocol. A
-- role that does not own the table gets a warning and nothing is done.
VACUUM (ANALYZE, INDEX_CLEANUP ON, SKIP_LOCKED, TRUNCATE false) /*schema*/leaserouter_jobs
