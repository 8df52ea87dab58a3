-- pgrouter schema, version 13: a periodic tick taken by a scheduler of a
-- version before 12 is recorded too. Safe to apply again (CREATE OR
-- REPLACE, and the trigger created only where it is missing).

-- A scheduler of a version before 12, running beside newer ones during a
-- rolling upgrade, takes a tick by raising last_tick to it (only ever to a
-- tick after it) and writes no record: without one, a newer scheduler that
-- kept the same tick (its row was locked by the old one's transaction)
-- would take it again, and enqueue its job again if the job was deleted
-- meanwhile. So the database records the tick whenever an update raises
-- last_tick, in the updating transaction (which holds the row's lock, as
-- every taker does). A newer scheduler's take (periodic_tick.sql) inserts
-- the record itself, in the statement that raises last_tick; the trigger
-- runs after that statement (AFTER ... FOR EACH ROW), finds the record and
-- does nothing (ON CONFLICT DO NOTHING): the take stays the statement's,
-- which enqueues the tick's job once. The ticks an old scheduler skipped
-- (woken late, it raises last_tick over several) get no record: it took
-- none of them, and a newer scheduler that kept one (planned it in time)
-- takes it, once, as it would a tick another newer scheduler skipped. An
-- update that does not raise last_tick (a deferred tick taken after a
-- younger one; periodic_prune.sql raising taken_to) records nothing here.
CREATE OR REPLACE FUNCTION /*schema*/leaserouter_periodic_record_tick() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO /*schema*/leaserouter_periodic_ticks (queue, name, tick)
	VALUES (NEW.queue, NEW.name, NEW.last_tick)
	ON CONFLICT (queue, name, tick) DO NOTHING;
	RETURN NULL;
END
$$;

-- Created once: CREATE TRIGGER takes the table's SHARE ROW EXCLUSIVE lock,
-- so no tick is being taken meanwhile, and every take after this
-- transaction commits is recorded. The ticks old schedulers took without
-- a record before it (the database at version 12) are all at or before
-- last_tick: taken_to rises to it, as version 12 did for those before it.
-- That gives up every tick at or before it that no one took, whatever a
-- scheduler kept it for: deferred after its own transaction failed,
-- found locked by another transaction, or skipped by an old scheduler
-- and kept by a version-12 one; no record tells them from the ticks old
-- schedulers took. The transaction is READ COMMITTED (Migrate states
-- it, whatever the session's default): the raise reads last_tick as
-- committed by the takes the lock waited for, not as of a snapshot taken
-- before them.
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgname = 'leaserouter_periodic_record_tick'
			AND tgrelid = '/*schema*/leaserouter_periodic'::regclass) THEN
		CREATE TRIGGER leaserouter_periodic_record_tick
			AFTER UPDATE OF last_tick ON /*schema*/leaserouter_periodic
			FOR EACH ROW
			WHEN (NEW.last_tick IS NOT NULL AND (OLD.last_tick IS NULL OR NEW.last_tick > OLD.last_tick))
			EXECUTE FUNCTION /*schema*/leaserouter_periodic_record_tick();
		UPDATE /*schema*/leaserouter_periodic SET taken_to = greatest(taken_to, last_tick)
		WHERE last_tick IS NOT NULL;
	END IF;
END
$$;
