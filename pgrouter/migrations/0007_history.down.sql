-- Undoes version 7: History's per-minute counts go.
DROP TABLE IF EXISTS /*schema*/leaserouter_history;
