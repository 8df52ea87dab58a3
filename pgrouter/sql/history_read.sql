-- The current minute of the database's clock (as Unix minutes) and, for
-- each of the 60 minutes up to it that has counts, the sums of every
-- process's counts of @queue in it.
WITH now AS (SELECT floor(extract(epoch FROM clock_timestamp()) / 60)::bigint AS m)
SELECT now.m, floor(extract(epoch FROM h.minute) / 60)::bigint,
	sum(h.completed)::bigint, sum(h.failed)::bigint, sum(h.dead)::bigint, sum(h.expired)::bigint, sum(h.stale)::bigint
FROM now LEFT JOIN /*schema*/leaserouter_history h
	ON h.queue = @queue AND h.minute > to_timestamp((now.m - 60) * 60)
GROUP BY now.m, h.minute
