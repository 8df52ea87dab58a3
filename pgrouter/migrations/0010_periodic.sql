-- pgrouter schema, version 10: periodic jobs (Router.AddPeriodic,
-- periodic.go). Safe to apply again (IF NOT EXISTS).

-- One row per queue and periodic job name, shared by every process that
-- schedules the job: since is the database's clock at the first
-- AddPeriodic of the pair ever (no tick before it is enqueued); last_tick
-- is the latest tick whose job a scheduler enqueued (NULL: none yet). A
-- scheduler takes a tick by raising last_tick in the transaction that
-- inserts the tick's job, so the row's lock orders the schedulers of a
-- tick and a tick is taken once, whenever its job is purged. Rows are
-- never deleted by pgrouter (RemovePeriodic stops one process's
-- scheduling, not the job's history).
CREATE TABLE IF NOT EXISTS /*schema*/leaserouter_periodic (
	queue     text        NOT NULL,
	name      text        NOT NULL,
	since     timestamptz NOT NULL DEFAULT clock_timestamp(),
	last_tick timestamptz,
	PRIMARY KEY (queue, name));
