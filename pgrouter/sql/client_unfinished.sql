-- Whether a job of the kinds @kinds in the queues @queues is not
-- finished (pending, scheduled or leased): Client.Drained waits for
-- false. EXISTS, not a count: the check runs at each wake-up of the
-- Client's queues while they drain, and stops at the first such job
-- instead of reading the whole backlog each time: a probe of
-- leaserouter_jobs_list (queue, state, kind, seq) per queue, state and
-- kind, index only where the visibility map allows.
SELECT EXISTS (SELECT FROM leaserouter_jobs
	WHERE queue = ANY(@queues::text[]) AND kind = ANY(@kinds::text[])
		AND state IN ('pending', 'scheduled', 'leased'))
