-- The instant of the planner's statistics of the jobs table, the source
-- of Stats' estimates: its last ANALYZE, by hand, by the Router's
-- maintenance loop (vacuum.go) or by autovacuum; NULL if never (or the
-- statistics were reset). One row of the cumulative statistics system,
-- no scan.
SELECT greatest(last_analyze, last_autoanalyze) FROM pg_stat_user_tables
WHERE relid = '/*schema*/leaserouter_jobs'::regclass
