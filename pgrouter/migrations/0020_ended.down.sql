-- Undoes version 20: the records of completions that deleted their
-- jobs' rows go.
DROP TABLE IF EXISTS /*schema*/leaserouter_ended;
