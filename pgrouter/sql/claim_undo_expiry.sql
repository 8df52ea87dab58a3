-- Undoes the expiry settlement of the leases claim @claim granted on
-- @queue whose expiry was settled before the resolver ran (the claimer
-- could not reach the database for a LeaseDuration; another process
-- settled them): nobody received them, so they are no attempt. It
-- matches only rows that show nothing happened since: still the claim's
-- (each grant writes its own claim id, so no later lease was granted,
-- and the claim's token is still the row's), pending or dead with ended
-- 'expired' (not canceled, not re-enqueued, which resets ended). It makes
-- them pending with the attempt not counted (a job that died of the
-- expiry lives again: purge_at cleared), ready since the claim's grant
-- (the expiry instant the settlement left in ready_at, less the claim's
-- lease of @lease_us microseconds: no heartbeat can have extended a lease
-- nobody received). What the settlement overwrote is restored where it
-- can be known: requeued false for a job with no earlier attempt (the
-- settlement's mark stays for a later one), and last_error the error of
-- the failure before the claim: the last record of the error history
-- once the settlement's is removed, or, for a job with no record, empty
-- when it had no earlier attempt and 'lease expired' otherwise. The
-- settlement's record is the history's last only when it is of the
-- undone attempt, says 'lease expired' and is at the expiry instant (the
-- ready_at the settlement left): an expiry settled by a process of
-- schema version 18 or earlier left none, and after a Retry the attempt
-- numbers start again, so an earlier record of the same attempt is no
-- proof. The claim id is cleared, as claim_hand_back.sql does. It
-- returns how many. The rows are found by a walk of the queue's pending
-- and failed jobs in leaserouter_jobs_order_unleased (migration 0026),
-- whose predicate the read names (state <> 'leased') so that the generic
-- plan proves it too: nothing indexes the claim id.
WITH l AS (
	SELECT queue, id, coalesce((errors -> -1 ->> 'attempt')::integer = attempt
			AND errors -> -1 ->> 'error' = 'lease expired'
			AND (errors -> -1 ->> 'at')::timestamptz = ready_at, false) AS recorded
	FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND claim = @claim AND state IN ('pending', 'failed') AND state <> 'leased'
		AND ended = 'expired' AND attempt > 0
	ORDER BY id FOR UPDATE),
u AS (
	UPDATE /*schema*/leaserouter_jobs j SET state = 'pending', attempt = j.attempt - 1, requeued = j.attempt > 1,
		ended = CASE WHEN j.attempt > 1 THEN 'expired' ELSE 'released' END,
		last_error = coalesce(j.errors -> (CASE WHEN l.recorded THEN -2 ELSE -1 END) ->> 'error',
			CASE WHEN j.attempt = 1 THEN '' ELSE j.last_error END),
		errors = CASE WHEN l.recorded THEN nullif(j.errors - -1, '[]'::jsonb) ELSE j.errors END,
		ready_at = j.ready_at - @lease_us * interval '1 microsecond', purge_at = NULL, claim = NULL,
		updated_at = clock_timestamp()
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND j.claim = @claim AND j.state IN ('pending', 'failed')
		AND j.ended = 'expired' AND j.attempt > 0
	RETURNING 1)
SELECT count(*) FROM u
