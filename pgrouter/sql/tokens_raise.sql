-- Raises the token sequence to at least @floor and the Unix time in
-- nanoseconds on the database's clock, never lowering it.
SELECT setval('/*schema*/leaserouter_token', greatest(
	(SELECT last_value FROM /*schema*/leaserouter_token),
	@floor::bigint,
	(extract(epoch FROM clock_timestamp()) * 1e9)::bigint), true)
