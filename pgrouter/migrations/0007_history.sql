-- pgrouter schema, version 7: History's per-minute counts. Safe to apply
-- again (IF NOT EXISTS).

-- What each process counted in each minute of the database's clock for
-- a queue (Router.History): completions, failed attempts, jobs that
-- became dead, leases that expired (counted by the process that settled
-- them) and lease operations refused. A process adds what it counted
-- every PollInterval (one row per queue, minute and process: processes
-- never wait for each other's rows, and no hot path writes here); rows
-- older than two hours are deleted by the same round.
CREATE TABLE IF NOT EXISTS /*schema*/leaserouter_history (
	queue     text        NOT NULL,
	minute    timestamptz NOT NULL,
	process   text        NOT NULL,
	completed bigint      NOT NULL DEFAULT 0,
	failed    bigint      NOT NULL DEFAULT 0,
	dead      bigint      NOT NULL DEFAULT 0,
	expired   bigint      NOT NULL DEFAULT 0,
	stale     bigint      NOT NULL DEFAULT 0,
	PRIMARY KEY (queue, minute, process)
);
