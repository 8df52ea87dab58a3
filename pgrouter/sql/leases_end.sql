-- Ends the valid ones of the leases @ids, @tokens (job IDs and tokens) of
-- @queue, each for @reason: 'completed' (Run's completions) or 'revoked'
-- (Close); leaserouter_end_lease (migration 0003) says where the job
-- goes, as it does for a single lease's end (lease_end.sql). The rows are
-- locked in ID order first (the order every statement locks several rows
-- in, so two never deadlock); each lease is then checked with its row
-- locked (leaserouter_lease_valid) and ended, or left as it is. It
-- returns each lease ended: ID, token, the state it left, the instant,
-- whether its row is gone; with @accept_ended, a lease ended for @reason
-- already (by an earlier statement whose reply was lost) too, with the
-- instant it ended, so a retry of an unknown outcome is not a refusal.
--
-- A completion at a Retention below zero (@retention_us 0) deletes the
-- job's row instead: the finished job would be purged at once anyway,
-- and one delete writes less than an update and the purge's lock and
-- delete. The statement then records, under its id @op, the leases it
-- ended so (leaserouter_ended, migration 0020): a retry of a completion
-- whose reply was lost finds no row to accept, and reads the records of
-- its earlier statements instead (leases_ended.sql).
--
-- The waiting form's lock is not redundant with the update's own: an
-- UPDATE that waits for a row another transaction only locked (no
-- change) goes on with the WHERE it evaluated before the wait, so a lease
-- that expired meanwhile would be ended (PostgreSQL rechecks only a row
-- changed meanwhile). Nor would dropping it write less WAL: the table's
-- BEFORE UPDATE triggers (migrations 0014 and 0019) lock each row an
-- UPDATE changes, with a lock record, unless the transaction holds the
-- row's lock already.
--
-- {lock} is the row lock, rendered twice (lockForms in statements.go):
-- FOR UPDATE, which waits for a row another transaction holds, and FOR
-- UPDATE SKIP LOCKED, which a heartbeat round sends on the connection
-- every Run and KeepAlive of the process share, so that a row held
-- elsewhere never stalls them: a lease skipped so is neither ended nor
-- returned; the round reads its row without a lock and tries again
-- later if it still shows the lease unexpired (or ended so already by an
-- earlier statement whose reply was lost), and takes it as refused
-- otherwise (lease.go, heldElsewhere).
--
-- The shape of l (leases_heartbeat.sql and leases_hand_back.sql lock
-- their rows the same way) is for the planner. The arrays come through
-- an OFFSET 0 subquery, so it estimates them alike whatever their length
-- and the prepared statement keeps one generic plan: planned once per
-- connection, not once per call (a custom plan of this statement costs
-- several times its execution to make). Each row is then
-- locked through its key in a LATERAL subquery, in the sorted order of
-- the IDs, so that a table with no statistics yet (a young one) does not
-- turn the lookups into a scan of the queue; and each lease is checked
-- there, its instant read just before (l.now, then l.valid, both after
-- the lock: the instant is never past a valid lease's expiry), so the
-- update joins by key alone, with no predicate on the state that would
-- let the partial index of leased rows be scanned for every row of l
-- instead. Plans still follow
-- the statistics: with none at all the update's join may scan the queue,
-- and a plan made while the table was tiny (analyzed at a few rows) may
-- scan it for every ID; each connection keeps such a plan until the next
-- ANALYZE of the table (autovacuum's, within a minute of its growth).
-- @accept_ended comes through a too: a custom plan folding it away looks
-- far cheaper than it is (its top node leaves out the CTEs' costs), and
-- was chosen at every call.
WITH l AS (
	SELECT j.id, h.token AS held, j.state AS was, j.token AS had, j.ended AS why, j.updated_at AS at,
		clock_timestamp() AS now, /*schema*/leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, h.token) AS valid,
		a.accept
	FROM (SELECT @ids::text[], @tokens::bigint[], @accept_ended::boolean OFFSET 0) AS a(ids, tokens, accept),
		LATERAL (SELECT * FROM unnest(a.ids, a.tokens) AS u(id, token) ORDER BY id) AS h,
		LATERAL (SELECT * FROM /*schema*/leaserouter_jobs j WHERE j.queue = @queue AND j.id = h.id {lock}) AS j),
x AS (
	UPDATE /*schema*/leaserouter_jobs j SET
		(state, ready_at, purge_at, owner, lease_expires_at, ended, requeued, updated_at, last_error) =
			(SELECT * FROM /*schema*/leaserouter_end_lease(@reason, j.attempt, j.max_attempts, false, 0,
				l.now, j.last_error, @retention_us))
	FROM l
	WHERE j.queue = @queue AND j.id = l.id AND l.valid AND NOT (@reason = 'completed' AND @retention_us::bigint = 0)
	RETURNING j.id, j.token, j.state, j.updated_at),
d AS (
	DELETE FROM /*schema*/leaserouter_jobs j
	USING l
	WHERE j.queue = @queue AND j.id = l.id AND l.valid AND @reason = 'completed' AND @retention_us::bigint = 0
	RETURNING j.id, j.token, l.now),
e AS (
	INSERT INTO /*schema*/leaserouter_ended (op, at, tokens, ats)
	SELECT @op::bigint, clock_timestamp(), array_agg(token), array_agg(now) FROM d HAVING count(*) > 0)
SELECT id, token, state::text, updated_at, false FROM x
UNION ALL
SELECT id, token, 'succeeded', now, true FROM d
UNION ALL
SELECT id, held, was::text, at, false FROM l WHERE accept AND had = held AND was <> 'leased' AND why = @reason
