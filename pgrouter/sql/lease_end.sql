-- Ends lease @token of job @id of @queue, if valid, for @reason:
-- 'completed', 'failed', 'released' or 'snoozed' (leaserouter_end_lease,
-- migrations 0003 and 0009, says where the job goes), with @error as the
-- job's last error (NULL keeps the job's), for a failure @permanent and
-- the backoff @delay_us, for a snooze the delay @delay_us. A snooze also
-- takes the attempt back: the snoozed lease is not counted, as a lease
-- handed back unstarted is not (leaserouter_hand_back). A failure also
-- appends its record (attempt, instant, holder, @error) to the job's
-- error history (leaserouter_append_error, migration 0019); any other
-- end leaves the history as it is. Complete, Fail,
-- Release, Snooze and CompleteTx run it after locking the row
-- (lease_lock.sql or lease_lock_of_token.sql) in the same transaction,
-- so its clock readings come after the lock. A resolvable
-- operation (@op, not 0: see outcome.go) acts only if it was not marked
-- abandoned. It returns one row, as leases_end.sql's rows are for a
-- batch: ID, token, whether it ended the lease, the state it left and the
-- instant, no expiry; and the row as found (its latest version: the row
-- is locked, unless it shows another lease): token, state, why its latest
-- lease ended (NULLs if the row is gone).
--
-- A single lease's end has a statement of its own, not leases_end.sql
-- with arrays of one: it costs less for one lease (BenchmarkEndOneLease
-- compares the two), and this one also says how the row was found (the
-- reason a refusal reports) and honours @op.
WITH upd AS (
	UPDATE /*schema*/leaserouter_jobs j SET
		(state, ready_at, purge_at, owner, lease_expires_at, ended, requeued, updated_at, last_error) =
			(SELECT * FROM /*schema*/leaserouter_end_lease(@reason, j.attempt, j.max_attempts, @permanent, @delay_us,
				c.now, coalesce(@error, j.last_error), @retention_us)),
		attempt = j.attempt - (@reason = 'snoozed')::integer,
		errors = CASE WHEN @reason = 'failed'
			THEN /*schema*/leaserouter_append_error(j.errors, j.attempt, c.now, j.owner, @error) ELSE j.errors END
	FROM (SELECT clock_timestamp() AS now) c
	WHERE j.queue = @queue AND j.id = @id AND /*schema*/leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, @token)
		AND NOT EXISTS (SELECT FROM /*schema*/leaserouter_abandoned_claims WHERE id = @op)
	RETURNING j.state, j.updated_at)
SELECT @id::text, @token::bigint, EXISTS (SELECT FROM upd), (SELECT state::text FROM upd), NULL::timestamptz,
	(SELECT updated_at FROM upd), j.token, j.state::text, j.ended
FROM (SELECT) one LEFT JOIN /*schema*/leaserouter_jobs j ON j.queue = @queue AND j.id = @id
