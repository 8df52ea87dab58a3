-- Whether a job of the kinds @kinds in the queues @queues is not
-- finished (pending, scheduled or leased): Client.Drained waits for
-- false. EXISTS, not a count: the check runs at each wake-up of the
-- Client's queues while they drain, and stops at the first such job
-- instead of reading the whole backlog each time. A Client's kinds are
-- never "" (Register refuses it).
--
-- Pending and scheduled jobs: one probe per queue, kind and state, each
-- an equality on every key of leaserouter_jobs_kind_list (queue, kind,
-- state, seq) WHERE kind <> '' AND state <> 'leased' (migration 0017;
-- the probe says both, so the planner proves the predicate) that stops
-- at its first entry, the generic plan too: a filter of kind = ANY(...)
-- over the queues' jobs would let a generic plan scan the table, at
-- every wake-up, once the Client's jobs are done. Each probe is ordered
-- by its index's order (seq; lease_expires_at below), so that no plan
-- expects a scan to meet a match early: without it, a small table was
-- scanned. Leased jobs: the queues' leased jobs (leaserouter_jobs_leased),
-- filtering the kinds (bounded by the leases).
SELECT EXISTS (SELECT FROM unnest(@queues::text[]) AS q(queue), unnest(@kinds::text[]) AS k(kind),
		unnest('{pending,scheduled}'::/*schema*/leaserouter_job_state[]) AS s(state),
		LATERAL (SELECT FROM /*schema*/leaserouter_jobs
			WHERE queue = q.queue AND kind = k.kind AND kind <> '' AND state = s.state AND state <> 'leased'
			ORDER BY seq LIMIT 1) AS j)
	OR EXISTS (SELECT FROM unnest(@queues::text[]) AS q(queue),
		LATERAL (SELECT FROM /*schema*/leaserouter_jobs
			WHERE queue = q.queue AND state = 'leased' AND kind = ANY(@kinds::text[])
			ORDER BY lease_expires_at LIMIT 1) AS j)
