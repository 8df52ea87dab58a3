-- Deletes the abandoned claim and operation marks older than @keep_us
-- microseconds, and the records of completions that deleted their jobs'
-- rows (leaserouter_ended) older than @ended_keep_us.
WITH ended AS (
	DELETE FROM /*schema*/leaserouter_ended WHERE at < clock_timestamp() - @ended_keep_us * interval '1 microsecond')
DELETE FROM /*schema*/leaserouter_abandoned_claims WHERE at < clock_timestamp() - @keep_us * interval '1 microsecond'
