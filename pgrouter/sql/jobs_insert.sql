-- Inserts the jobs of the arrays @ids, @priorities, @max_attempts,
-- @payloads, @run_at, @delay_us, @timeout_us (each attempt's limit, 0 for
-- none; timeout_of marks it the job's: migration 0009), @metadata (a
-- JSON object, NULL for none) into @queue, each of kind @kind (kind_of
-- marks kind and metadata the job's: migration 0014), at the database's
-- clock:
-- pending at once, or scheduled until their run-at (a given run_at, or
-- now + delay_us). Their enqueue order (seq) is taken in array order; the
-- rows are then inserted in ID order, the order in which every batch
-- locks rows, so two batches with IDs in common wait for each other
-- instead of deadlocking. A known ID is left alone unless its job is
-- finished and past its retention, when the row becomes the new job (the
-- old one is purged by this statement). It returns the inserted IDs with
-- their instant and, for a row that replaced a purged job, that job's
-- token, attempt and purge time (read at the statement's snapshot, before
-- the update, and only for such a row); when there are any, it notifies
-- @channel (with the insert, so only if it commits), whose listeners take
-- a new due instant from a scheduled job too.
--
-- Enqueues outside a caller's transaction run jobs_insert_new.sql first,
-- which writes less (see there), and this statement when that one
-- defers to it.
-- The arrays come through an OFFSET 0 subquery, so the planner estimates
-- them alike whatever their length and the prepared statement keeps one
-- generic plan (with the arrays in sight, a batch of one planned anew at
-- every call).
WITH c AS (SELECT clock_timestamp() AS now),
v AS (
	SELECT x.*, nextval('/*schema*/leaserouter_job_seq') AS seq
	FROM (SELECT r.id, r.priority, r.max_attempts, r.payload, r.timeout_us, r.metadata, c.now,
			CASE WHEN r.run_at IS NOT NULL THEN greatest(r.run_at, c.now)
				ELSE c.now + r.delay_us * interval '1 microsecond' END AS ready
		FROM (SELECT @ids::text[], @priorities::bigint[], @max_attempts::integer[], @payloads::text[],
				@run_at::timestamptz[], @delay_us::bigint[], @timeout_us::bigint[], @metadata::text[] OFFSET 0)
				AS a(ids, priorities, max_attempts, payloads, run_at, delay_us, timeout_us, metadata),
			LATERAL unnest(a.ids, a.priorities, a.max_attempts, a.payloads, a.run_at, a.delay_us, a.timeout_us, a.metadata)
			WITH ORDINALITY AS r(id, priority, max_attempts, payload, run_at, delay_us, timeout_us, metadata, ord), c
		ORDER BY r.ord) x),
ins AS (
	INSERT INTO /*schema*/leaserouter_jobs AS j (queue, id, seq, state, priority, ready_at, max_attempts, payload, timeout_us,
		timeout_of, kind, metadata, kind_of, created_at, updated_at)
	SELECT @queue, id, seq, CASE WHEN ready > now THEN 'scheduled'::/*schema*/leaserouter_job_state ELSE 'pending'::/*schema*/leaserouter_job_state END,
		priority, ready, max_attempts, payload::jsonb, timeout_us, now, @kind, metadata::jsonb, now, now, now
	FROM v ORDER BY id
	ON CONFLICT (queue, id) DO UPDATE SET
		seq = excluded.seq, state = excluded.state, priority = excluded.priority, ready_at = excluded.ready_at,
		requeued = false, attempt = 0, max_attempts = excluded.max_attempts, token = 0, owner = '',
		lease_expires_at = NULL, ended = '', payload = excluded.payload, timeout_us = excluded.timeout_us,
		timeout_of = excluded.timeout_of, kind = excluded.kind, metadata = excluded.metadata, kind_of = excluded.kind_of,
		progress = NULL, last_error = '', errors = NULL,
		created_at = excluded.created_at, updated_at = excluded.updated_at, purge_at = NULL
	WHERE /*schema*/leaserouter_past_retention(j.state, j.purge_at)
	RETURNING j.id, j.created_at, NOT (j.xmax = 0) AS replaced),
n AS (SELECT pg_notify(@channel, @queue) FROM (SELECT FROM ins LIMIT 1) one)
SELECT ins.id, ins.created_at, (SELECT count(*) FROM n), o.token, o.attempt, o.purge_at
FROM ins LEFT JOIN LATERAL (
	-- The replaced row as the statement's snapshot saw it, read by its
	-- primary key and only for a replaced row (OFFSET 0 keeps the
	-- subquery whole: the planner may not join it to every finished job
	-- of the queue, as it did to the partial index of finished jobs).
	SELECT token, attempt, purge_at, state FROM /*schema*/leaserouter_jobs
	WHERE ins.replaced AND queue = @queue AND id = ins.id
	OFFSET 0) o ON o.state IN ('succeeded', 'failed', 'canceled')
