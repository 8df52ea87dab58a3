-- Undoes version 13: the trigger recording an older scheduler's ticks,
-- and its function, go.
DROP TRIGGER IF EXISTS leaserouter_periodic_record_tick ON /*schema*/leaserouter_periodic;
DROP FUNCTION IF EXISTS /*schema*/leaserouter_periodic_record_tick();
