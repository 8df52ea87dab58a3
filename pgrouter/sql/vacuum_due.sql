-- What the maintenance of the jobs table (vacuum.go) is due: a vacuum,
-- when the statistics count at least @min_dead dead tuples in it (as
-- autovacuum reads them: up to a few seconds behind) and no vacuum,
-- autovacuum's or another process's, ended in the last @interval_us
-- microseconds; an ANALYZE, when at least @min_changed rows, and a tenth
-- of its live ones, changed since the last (anyone's) and none ended in
-- that time either. Both false if the table has no statistics yet.
SELECT coalesce(s.n_dead_tup >= @min_dead
		AND coalesce(greatest(s.last_vacuum, s.last_autovacuum) < s.now - @interval_us * interval '1 microsecond', true), false),
	coalesce(s.n_mod_since_analyze >= greatest(@min_changed, s.n_live_tup / 10)
		AND coalesce(greatest(s.last_analyze, s.last_autoanalyze) < s.now - @interval_us * interval '1 microsecond', true), false)
FROM (SELECT) one
	LEFT JOIN (SELECT *, clock_timestamp() AS now FROM pg_stat_user_tables WHERE relid = 'leaserouter_jobs'::regclass) s ON true
