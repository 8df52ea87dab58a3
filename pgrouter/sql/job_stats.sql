-- Counts @queue's jobs by state, finished ones while retained.
SELECT state::text, count(*) FROM leaserouter_jobs
WHERE queue = @queue AND NOT leaserouter_past_retention(state, purge_at)
GROUP BY state
