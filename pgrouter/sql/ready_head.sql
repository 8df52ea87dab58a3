-- When the job first in @queue's ready order (highest priority, then
-- earliest ready, then enqueue order: the next a claim would take) became
-- ready; no row when no job is pending.
--
-- Read from leaserouter_jobs_kind_ready (queue, kind, priority DESC,
-- ready_at, seq) WHERE state <= 'pending' alone, the index the claim
-- walks (version 21 dropped the kindless one): the kinds with pending
-- jobs are found by a skip scan (one probe of the index for the first
-- kind, then one for the next kind above each), the head of each kind by
-- one more probe, and the first of those heads is the queue's. 2k + 1
-- probes for k kinds with pending jobs, whatever the queue's size. The
-- state test is written state <= 'pending', the index's predicate, so
-- that every probe is served by it.
WITH RECURSIVE kinds AS (
	(SELECT kind FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND state <= 'pending'
	ORDER BY kind LIMIT 1)
	UNION ALL
	SELECT (SELECT j.kind FROM /*schema*/leaserouter_jobs j
		WHERE j.queue = @queue AND j.state <= 'pending' AND j.kind > k.kind
		ORDER BY j.kind LIMIT 1)
	FROM kinds k WHERE k.kind IS NOT NULL)
SELECT h.ready_at
FROM kinds k CROSS JOIN LATERAL (
	SELECT priority, ready_at, seq FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND kind = k.kind AND state <= 'pending'
	ORDER BY priority DESC, ready_at, seq LIMIT 1) h
ORDER BY h.priority DESC, h.ready_at, h.seq
LIMIT 1
