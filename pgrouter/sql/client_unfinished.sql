-- Whether a job of the kinds @kinds in the queues @queues is not
-- finished (pending, scheduled or leased): Client.Drained waits for
-- false. EXISTS, not a count: the check runs at each wake-up of the
-- Client's queues while they drain, and stops at the first such job
-- instead of reading the whole backlog each time. A Client's kinds are
-- never "" (Register refuses it). Pending and scheduled jobs: kind <> ''
-- and state <> 'leased' let the planner walk leaserouter_jobs_kind_list
-- (queue, kind, state, seq) WHERE kind <> '' AND state <> 'leased'
-- (migration 0017), the generic plan too; leased jobs: the queues' leases
-- in flight, filtering the kind.
SELECT EXISTS (SELECT FROM leaserouter_jobs
		WHERE queue = ANY(@queues::text[]) AND kind = ANY(@kinds::text[]) AND kind <> '' AND state <> 'leased'
			AND state IN ('pending', 'scheduled'))
	OR EXISTS (SELECT FROM leaserouter_jobs
		WHERE queue = ANY(@queues::text[]) AND state = 'leased' AND kind = ANY(@kinds::text[]))
