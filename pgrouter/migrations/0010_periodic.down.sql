-- Undoes version 10: the periodic jobs' rows go (each periodic job's
-- first instant and latest tick taken: after an upgrade, ticks may be
-- taken again).
DROP TABLE IF EXISTS /*schema*/leaserouter_periodic;
