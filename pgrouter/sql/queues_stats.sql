-- Counts every queue's jobs by state, finished ones while retained. It
-- reads the whole table (the order index, and the rows of finished jobs
-- for their purge time).
SELECT queue, state::text, count(*) FROM leaserouter_jobs
WHERE NOT leaserouter_past_retention(state, purge_at)
GROUP BY queue, state
