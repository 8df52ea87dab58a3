-- Takes the tick @tick of the periodic job @name of @queue, in the
-- transaction that then inserts the tick's job (jobs_insert): one row if
-- taken, none otherwise. Taken only if the tick is after every tick taken
-- before (last_tick), not before the job's first registration (since),
-- and, on the database's clock as the row is locked, due and younger than
-- @retention_us. The row stays locked until the transaction ends: a
-- concurrent scheduler of the same tick waits, then finds it taken (the
-- condition is checked again on the row it waited for), or takes it if
-- that transaction rolled back (its process died, say).
UPDATE leaserouter_periodic
SET last_tick = @tick::timestamptz
WHERE queue = @queue AND name = @name
	AND @tick::timestamptz >= since
	AND (last_tick IS NULL OR last_tick < @tick::timestamptz)
	AND @tick::timestamptz <= clock_timestamp()
	AND clock_timestamp() < @tick::timestamptz + @retention_us::bigint * interval '1 microsecond'
