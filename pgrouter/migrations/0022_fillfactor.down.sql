-- Undoes version 22: the jobs table's fillfactor is version 1's 85 again
-- where it is 50, the value version 22 sets (any other fillfactor set by
-- hand is left as it is; a 50 set by hand before version 22 cannot be told
-- from version 22's own and is reset too).
DO $$
BEGIN
	IF (SELECT reloptions FROM pg_class WHERE oid = '/*schema*/leaserouter_jobs'::regclass) @> ARRAY['fillfactor=50'] THEN
		ALTER TABLE /*schema*/leaserouter_jobs SET (fillfactor = 85);
	END IF;
END
$$;
