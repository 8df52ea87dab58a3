-- How many jobs of the kinds @kinds in the queues @queues are not
-- finished (pending, scheduled or leased): Client.Drained waits for 0.
-- Served by leaserouter_jobs_kind_order (queue, kind, state, seq).
SELECT count(*) FROM leaserouter_jobs
WHERE queue = ANY(@queues::text[]) AND kind = ANY(@kinds::text[])
	AND state IN ('pending', 'scheduled', 'leased')
