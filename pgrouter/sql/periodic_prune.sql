-- Deletes the records of @queue's periodic ticks older than @retention_us
-- (leaserouter_periodic_ticks), which no scheduler of that retention
-- takes any more, and raises each job's taken_to over them, as a tick's
-- taker does for its job (periodic_tick.sql): that taker prunes only the
-- job whose tick it takes, and a job no longer scheduled anywhere would
-- keep its records forever. The jobs' rows are locked FOR UPDATE SKIP
-- LOCKED: a job whose row a tick's transaction locks is left to it (or to
-- the next run), never waited for.
WITH cutoff AS (
	SELECT clock_timestamp() - @retention_us::bigint * interval '1 microsecond' AS at
), locked AS (
	SELECT queue, name FROM /*schema*/leaserouter_periodic
	WHERE queue = @queue
	FOR UPDATE SKIP LOCKED
), raised AS (
	UPDATE /*schema*/leaserouter_periodic p
	SET taken_to = greatest(p.taken_to, cutoff.at)
	FROM locked, cutoff
	WHERE p.queue = locked.queue AND p.name = locked.name
		AND EXISTS (SELECT FROM /*schema*/leaserouter_periodic_ticks t WHERE t.queue = p.queue AND t.name = p.name
			AND t.tick <= cutoff.at)
)
DELETE FROM /*schema*/leaserouter_periodic_ticks t
USING locked, cutoff
WHERE t.queue = locked.queue AND t.name = locked.name
	AND t.tick <= cutoff.at
