-- pgrouter schema, version 22: the jobs table's pages are filled to half
-- by inserts (fillfactor 50, version 1's 85 before), so that a job's
-- claim and its end, each an update of indexed columns that writes a new
-- version of the row, find room on the job's own page: such an update
-- is logged smaller and locks no second page, about 80 to 120 bytes of
-- WAL a job fewer, for about 150 bytes more table a job kept (the
-- package documentation's Schema section gives the figures). Pages already filled keep
-- their rows; the setting applies to pages filled from now on. A
-- fillfactor set by hand (any but 85) is left as it is. A catalog change
-- only: reads and writes of the table go on (it takes a SHARE UPDATE
-- EXCLUSIVE lock, as a vacuum does).
DO $$
BEGIN
	IF (SELECT reloptions FROM pg_class WHERE oid = '/*schema*/leaserouter_jobs'::regclass) @> ARRAY['fillfactor=85'] THEN
		ALTER TABLE /*schema*/leaserouter_jobs SET (fillfactor = 50);
	END IF;
END
$$;
