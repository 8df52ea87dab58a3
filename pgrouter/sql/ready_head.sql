-- When the job first in @queue's ready order (highest priority, then
-- earliest ready, then enqueue order: the next a claim would take) became
-- ready; no row when no job is pending. One probe of
-- leaserouter_jobs_ready, whatever the queue's size.
SELECT ready_at
FROM /*schema*/leaserouter_jobs
WHERE queue = @queue AND state = 'pending'
ORDER BY priority DESC, ready_at, seq
LIMIT 1
