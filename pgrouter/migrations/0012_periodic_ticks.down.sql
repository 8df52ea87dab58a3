-- Undoes version 12: the records of the ticks taken go, and taken_to.
DROP TABLE IF EXISTS /*schema*/leaserouter_periodic_ticks;
ALTER TABLE /*schema*/leaserouter_periodic DROP COLUMN IF EXISTS taken_to;
