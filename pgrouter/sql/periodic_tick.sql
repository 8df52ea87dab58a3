-- Takes the tick @tick of the periodic job @name of @queue, in the
-- transaction that then inserts the tick's job (jobs_insert), without
-- ever waiting for another transaction: it returns taken (the tick is
-- this transaction's) and locked_elsewhere (another transaction locks the
-- job's row: the tick's outcome is unknown, the caller defers it and
-- tries it again later).
--
-- The job's row is locked FOR UPDATE SKIP LOCKED, never waited for: the
-- transaction locking it may be a scheduler stalled inside its tick (a
-- process stopped or cut off from the network keeps its session, and the
-- lock, until the server ends it), and waiting would stall this
-- process's scheduler, every periodic job of it. The row lock orders the
-- takers of the job's ticks; the tick's record in
-- leaserouter_periodic_ticks (its primary key) makes it taken once: in
-- any order (a tick deferred behind a stalled transaction that rolled
-- back may be taken after a younger one) and whenever its job is purged.
-- The tick is taken only if it has no record, is after taken_to (ticks
-- at or before it may have lost their record), not before the job's
-- first registration (since), and, on the database's clock as the row
-- is locked, due and younger than @retention_us. Its taker deletes the
-- records of the job's ticks older than @retention_us before @tick (no
-- scheduler of that retention takes them any more) and raises taken_to
-- over them, and raises last_tick (the latest tick taken: a scheduler
-- that starts plans from it). Raising last_tick fires the trigger
-- leaserouter_periodic_record_tick after this statement (it records the
-- ticks that older versions' schedulers take by raising last_tick
-- alone): it finds the record inserted here and does nothing, so taken
-- is true and the tick's job is inserted once.
--
-- The rest of the transaction is bounded, so that a scheduler stalled
-- inside it locks the row for a while only, each bound set for this
-- transaction only: lock_timeout (the job's insert waiting for a
-- conflicting one; the caller resets it before its COMMIT, which may wait
-- for the cluster's NOTIFY lock), idle_in_transaction_session_timeout
-- (the server ends the session of a process that stops talking between
-- statements, and the transaction rolls back: the tick is free again for
-- the others) and, from PostgreSQL 17, transaction_timeout (the same for
-- a process that stops in the middle of a statement's messages).
WITH bounds AS (
	SELECT set_config('lock_timeout', @lock_timeout_ms::bigint::text, true),
		set_config('idle_in_transaction_session_timeout', @idle_timeout_ms::bigint::text, true),
		CASE WHEN current_setting('server_version_num')::int >= 170000
			THEN set_config('transaction_timeout', @txn_timeout_ms::bigint::text, true) END
), locked AS (
	SELECT queue, name, since, taken_to FROM /*schema*/leaserouter_periodic
	WHERE queue = @queue AND name = @name
	FOR UPDATE SKIP LOCKED
), taken AS (
	INSERT INTO /*schema*/leaserouter_periodic_ticks (queue, name, tick)
	SELECT queue, name, @tick::timestamptz FROM locked
	WHERE @tick::timestamptz >= since
		AND (taken_to IS NULL OR taken_to < @tick::timestamptz)
		AND @tick::timestamptz <= clock_timestamp()
		AND clock_timestamp() < @tick::timestamptz + @retention_us::bigint * interval '1 microsecond'
	ON CONFLICT (queue, name, tick) DO NOTHING
	RETURNING queue, name
), pruned AS (
	DELETE FROM /*schema*/leaserouter_periodic_ticks t
	USING taken
	WHERE t.queue = taken.queue AND t.name = taken.name
		AND t.tick <= @tick::timestamptz - @retention_us::bigint * interval '1 microsecond'
), raised AS (
	UPDATE /*schema*/leaserouter_periodic p
	SET last_tick = greatest(p.last_tick, @tick::timestamptz),
		taken_to = greatest(p.taken_to, @tick::timestamptz - @retention_us::bigint * interval '1 microsecond')
	FROM taken
	WHERE p.queue = taken.queue AND p.name = taken.name
)
SELECT EXISTS (SELECT FROM taken) AS taken,
	NOT EXISTS (SELECT FROM locked)
		AND EXISTS (SELECT FROM /*schema*/leaserouter_periodic WHERE queue = @queue AND name = @name) AS locked_elsewhere
FROM bounds
