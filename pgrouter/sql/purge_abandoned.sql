-- Deletes the abandoned claim and operation marks, and the records of
-- completions that deleted their jobs' rows (leaserouter_ended), older
-- than @keep_us microseconds.
WITH ended AS (
	DELETE FROM /*schema*/leaserouter_ended WHERE at < clock_timestamp() - @keep_us * interval '1 microsecond')
DELETE FROM /*schema*/leaserouter_abandoned_claims WHERE at < clock_timestamp() - @keep_us * interval '1 microsecond'
