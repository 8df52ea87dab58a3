-- Whether a job of the kinds @kinds in the queues @queues is not
-- finished (pending, scheduled or leased): Client.Drained waits for
-- false. EXISTS, not a count: the check runs at each wake-up of the
-- Client's queues while they drain, and stops at the first such job
-- instead of reading the whole backlog each time. A Client's kinds are
-- never "" (Register refuses it): kind <> '' lets the planner walk
-- leaserouter_jobs_kind_order (queue, kind, state, seq) WHERE kind <> '',
-- the generic plan too.
SELECT EXISTS (SELECT FROM leaserouter_jobs
	WHERE queue = ANY(@queues::text[]) AND kind = ANY(@kinds::text[]) AND kind <> ''
		AND state IN ('pending', 'scheduled', 'leased'))
