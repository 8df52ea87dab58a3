-- Deletes the abandoned claim and operation marks older than @keep_us
-- microseconds.
DELETE FROM /*schema*/leaserouter_abandoned_claims WHERE at < clock_timestamp() - @keep_us * interval '1 microsecond'
