-- Takes the tick @tick of the periodic job @name of @queue, in the
-- transaction that then inserts the tick's job (jobs_insert), without
-- ever waiting for another transaction: it returns taken (the tick is
-- this transaction's) and held (another transaction holds the job's row:
-- the tick's outcome is unknown, the caller tries it again later).
--
-- The job's row is locked FOR UPDATE SKIP LOCKED, never waited for: the
-- transaction holding it may be a scheduler stalled inside its tick (a
-- process stopped or cut off from the network keeps its session, and the
-- lock, until the server ends it), and waiting would stall this
-- process's scheduler, every periodic job of it. The tick is taken only
-- if it is after every tick taken before (last_tick), not before the
-- job's first registration (since), and, on the database's clock as the
-- row is locked, due and younger than @retention_us; the row stays locked
-- until the transaction ends, so a tick is taken once.
--
-- The rest of the transaction is bounded, so that a scheduler stalled
-- inside it holds the row for a while only: lock_timeout (the job's
-- insert waiting for a conflicting one) and
-- idle_in_transaction_session_timeout (the server ends the session of a
-- process that stops talking before its commit, and the transaction rolls
-- back: the tick is free again for the others), set for this transaction
-- only.
WITH bounds AS (
	SELECT set_config('lock_timeout', @lock_timeout_ms::bigint::text, true),
		set_config('idle_in_transaction_session_timeout', @idle_timeout_ms::bigint::text, true)
), locked AS (
	SELECT queue, name FROM leaserouter_periodic
	WHERE queue = @queue AND name = @name
	FOR UPDATE SKIP LOCKED
), taken AS (
	UPDATE leaserouter_periodic p
	SET last_tick = @tick::timestamptz
	FROM locked
	WHERE p.queue = locked.queue AND p.name = locked.name
		AND @tick::timestamptz >= p.since
		AND (p.last_tick IS NULL OR p.last_tick < @tick::timestamptz)
		AND @tick::timestamptz <= clock_timestamp()
		AND clock_timestamp() < @tick::timestamptz + @retention_us::bigint * interval '1 microsecond'
	RETURNING 1
)
SELECT EXISTS (SELECT FROM taken) AS taken,
	NOT EXISTS (SELECT FROM locked)
		AND EXISTS (SELECT FROM leaserouter_periodic WHERE queue = @queue AND name = @name) AS held
FROM bounds
