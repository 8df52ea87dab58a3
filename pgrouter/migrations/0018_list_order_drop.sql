-- pgrouter schema, version 18: the list indexes that version 17's
-- leaserouter_jobs_list replaces are dropped. Safe to apply again (IF
-- EXISTS). A process of version 16 or earlier still running during a
-- rolling upgrade keeps working, its List and Stats at a higher cost:
-- their walk of a state in enqueue order (leaserouter_jobs_order) is
-- then a read of the state's entries in leaserouter_jobs_list and a sort
-- (an admin call's cost growing with the state's jobs, never the claim's:
-- no claim reads either index).
DROP INDEX IF EXISTS leaserouter_jobs_kind_order;
DROP INDEX IF EXISTS leaserouter_jobs_order;
