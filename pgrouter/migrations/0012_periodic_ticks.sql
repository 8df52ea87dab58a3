-- pgrouter schema, version 12: each periodic tick taken is recorded on its
-- own (periodic_tick.sql). Safe to apply again (IF NOT EXISTS).

-- One row per tick taken, inserted by the transaction that takes the tick
-- and inserts its job: the primary key makes a tick taken once, whatever
-- the order in which ticks are taken (a tick another scheduler's stalled
-- transaction held may be taken after a younger one) and whenever its
-- job is purged or deleted. The taker of a tick deletes the records of
-- the job's ticks older than its Retention before that tick, which no
-- scheduler takes any more, and raises the row's taken_to over them.
CREATE TABLE IF NOT EXISTS /*schema*/leaserouter_periodic_ticks (
	queue text        NOT NULL,
	name  text        NOT NULL,
	tick  timestamptz NOT NULL,
	PRIMARY KEY (queue, name, tick));

-- taken_to: no tick at or before it is taken any more (its record may be
-- gone). Ticks taken before this version have no record: they are all at
-- or before last_tick, which starts taken_to.
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '/*schema*/leaserouter_periodic'::regclass
			AND attname = 'taken_to' AND NOT attisdropped) THEN
		ALTER TABLE /*schema*/leaserouter_periodic ADD COLUMN taken_to timestamptz;
		UPDATE /*schema*/leaserouter_periodic SET taken_to = last_tick;
	END IF;
END
$$;
