-- Inserts the jobs of the arrays @ids, ... (as jobs_insert.sql, the same
-- parameters and result columns) with a plain INSERT, no ON CONFLICT
-- clause: a row inserted so logs no speculative-insertion confirmation
-- (48 bytes of WAL a job, of about 600 an enqueue writes). Known IDs are
-- found first, each by its primary key at the statement's snapshot (a
-- subquery in the select list: a lookup a row, never a join the planner
-- may turn into a read of the queue): a job known and not past its
-- retention is left alone, a duplicate, as jobs_insert.sql leaves it
-- (decided at the snapshot, without waiting for a row another
-- transaction holds, where jobs_insert.sql locks it: a job deleted or
-- purged since is a duplicate still, as it was at the snapshot); if some job of the
-- batch is finished and past its retention, nothing is inserted and one
-- row of NULLs says so: the caller runs jobs_insert.sql, which replaces
-- such rows, for the whole batch. The rows returned otherwise are the
-- inserted IDs with their instant and the notification's count, NULL
-- token, attempt and purge time (nothing replaced).
--
-- An ID unknown at the snapshot but inserted by a transaction that
-- committed since fails the statement with a unique violation (nothing
-- it wrote stays): the caller runs jobs_insert.sql then, which waits for
-- such a row and decides as always. In a caller's transaction that error
-- would abort it, so enqueues there run jobs_insert.sql alone.
-- The arrays come through an OFFSET 0 subquery, so the planner estimates
-- them alike whatever their length and the prepared statement keeps one
-- generic plan (with the arrays in sight, a batch of one planned anew at
-- every call).
WITH c AS (SELECT clock_timestamp() AS now),
k AS (
	SELECT r.*, (SELECT coalesce(/*schema*/leaserouter_past_retention(j.state, j.purge_at), false)
			FROM /*schema*/leaserouter_jobs j WHERE j.queue = @queue AND j.id = r.id) AS known -- NULL: unknown; true: replaceable
	FROM (SELECT @ids::text[], @priorities::bigint[], @max_attempts::integer[], @payloads::text[],
			@run_at::timestamptz[], @delay_us::bigint[], @timeout_us::bigint[], @metadata::text[] OFFSET 0)
			AS a(ids, priorities, max_attempts, payloads, run_at, delay_us, timeout_us, metadata),
		LATERAL unnest(a.ids, a.priorities, a.max_attempts, a.payloads, a.run_at, a.delay_us, a.timeout_us, a.metadata)
		WITH ORDINALITY AS r(id, priority, max_attempts, payload, run_at, delay_us, timeout_us, metadata, ord)),
deferred AS (SELECT EXISTS (SELECT FROM k WHERE known) AS yes),
v AS (
	SELECT x.*, nextval('/*schema*/leaserouter_job_seq') AS seq
	FROM (SELECT k.id, k.priority, k.max_attempts, k.payload, k.timeout_us, k.metadata, c.now,
			CASE WHEN k.run_at IS NOT NULL THEN greatest(k.run_at, c.now)
				ELSE c.now + k.delay_us * interval '1 microsecond' END AS ready
		FROM k, c
		WHERE k.known IS NULL AND NOT (SELECT yes FROM deferred)
		ORDER BY k.ord) x),
ins AS (
	INSERT INTO /*schema*/leaserouter_jobs (queue, id, seq, state, priority, ready_at, max_attempts, payload, timeout_us,
		timeout_of, kind, metadata, kind_of, created_at, updated_at)
	SELECT @queue, id, seq, CASE WHEN ready > now THEN 'scheduled'::/*schema*/leaserouter_job_state ELSE 'pending'::/*schema*/leaserouter_job_state END,
		priority, ready, max_attempts, payload::jsonb, timeout_us, now, @kind, metadata::jsonb, now, now, now
	FROM v ORDER BY id
	RETURNING id, created_at),
n AS (SELECT pg_notify(@channel, @queue) FROM (SELECT FROM ins LIMIT 1) one)
SELECT ins.id, ins.created_at, (SELECT count(*) FROM n), NULL::bigint, NULL::integer, NULL::timestamptz FROM ins
UNION ALL
SELECT NULL, NULL, 0, NULL, NULL, NULL WHERE (SELECT yes FROM deferred)
