-- What the maintenance of the jobs table (vacuum.go) is due: a vacuum,
-- when the statistics count at least @min_dead dead tuples in it (as
-- autovacuum reads them: up to a few seconds behind), no vacuum,
-- autovacuum's or another process's, ended in the last @interval_us
-- microseconds, and no transaction of this database began before
-- @last_start (the start of this Router's last vacuum; NULL: none) and
-- holds a snapshot (its xmin): that vacuum removed what was dead before
-- it, and the snapshot keeps what died since, so another would remove
-- nothing (with no right to see other roles' sessions, none is seen);
-- an ANALYZE, when at least @min_changed rows, and a tenth of its live
-- ones, changed since the last (anyone's) and none ended in @interval_us
-- either. Both false if the table has no statistics yet, or if this
-- role is not a member of the table's owner (VACUUM and ANALYZE would do
-- nothing but warn, in the server's log, at every check). And the
-- database's clock.
SELECT coalesce(s.n_dead_tup >= @min_dead
		AND coalesce(greatest(s.last_vacuum, s.last_autovacuum) < s.now - @interval_us * interval '1 microsecond', true)
		AND NOT EXISTS (SELECT FROM pg_stat_activity a WHERE a.datname = current_database()
			AND a.backend_xmin IS NOT NULL AND a.xact_start < @last_start::timestamptz), false),
	coalesce(s.n_mod_since_analyze >= greatest(@min_changed, s.n_live_tup / 10)
		AND coalesce(greatest(s.last_analyze, s.last_autoanalyze) < s.now - @interval_us * interval '1 microsecond', true), false),
	clock_timestamp()
FROM (SELECT) one
	LEFT JOIN (SELECT t.*, clock_timestamp() AS now FROM pg_stat_user_tables t
		JOIN pg_class c ON c.oid = t.relid AND pg_has_role(c.relowner, 'MEMBER')
		WHERE t.relid = '/*schema*/leaserouter_jobs'::regclass) s ON true
