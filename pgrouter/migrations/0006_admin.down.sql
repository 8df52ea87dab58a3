-- Undoes version 6: List's index goes, and with the queues table every
-- queue's pause (the queues paused are running again).
DROP INDEX IF EXISTS /*schema*/leaserouter_jobs_order;
DROP TABLE IF EXISTS /*schema*/leaserouter_queues;
