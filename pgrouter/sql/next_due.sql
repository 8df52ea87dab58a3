-- How long, in seconds on the database's clock, until @queue's next
-- scheduled job is ready or its next lease expires; NULL if neither
-- exists.
SELECT extract(epoch FROM least(
	(SELECT min(ready_at) FROM /*schema*/leaserouter_jobs WHERE queue = @queue AND state = 'scheduled'),
	(SELECT min(lease_expires_at) FROM /*schema*/leaserouter_jobs WHERE queue = @queue AND state = 'leased'))
	- clock_timestamp())::float8
