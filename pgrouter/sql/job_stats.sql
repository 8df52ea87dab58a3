-- Counts @queue's jobs by state, finished ones while retained.
SELECT state::text, count(*) FROM leaserouter_jobs
WHERE queue = @queue AND NOT (state IN ('succeeded', 'failed', 'canceled') AND purge_at <= clock_timestamp())
GROUP BY state
