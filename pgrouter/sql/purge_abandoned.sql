-- Deletes the abandoned claim and operation marks older than @keep_us
-- microseconds, and the records of completions that deleted their jobs'
-- rows (leaserouter_ended) older than @ended_keep_us. The instant is read
-- once (a subquery), so the bound is an index condition: each purge reads
-- the records it deletes (leaserouter_ended_at), not the younger ones.
WITH ended AS (
	DELETE FROM /*schema*/leaserouter_ended WHERE at < (SELECT clock_timestamp()) - @ended_keep_us * interval '1 microsecond')
DELETE FROM /*schema*/leaserouter_abandoned_claims WHERE at < (SELECT clock_timestamp()) - @keep_us * interval '1 microsecond'
