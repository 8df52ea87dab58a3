-- How many jobs of the kinds @kinds in the queues @queues are not
-- finished (pending, scheduled or leased): Client.Drained waits for 0.
-- A Client's kinds are never "" (Register refuses it): kind <> '' lets
-- the planner walk leaserouter_jobs_kind_order (queue, kind, state,
-- seq) WHERE kind <> '', the generic plan too.
SELECT count(*) FROM leaserouter_jobs
WHERE queue = ANY(@queues::text[]) AND kind = ANY(@kinds::text[]) AND kind <> ''
	AND state IN ('pending', 'scheduled', 'leased')
