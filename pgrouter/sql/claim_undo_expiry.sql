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
-- can be known: for a job with no earlier attempt, last_error empty and
-- requeued false, as before the claim; for a later attempt the
-- settlement's marks stay (requeued; last_error 'lease expired', unless
-- the error history tells the error before it). The settlement's record
-- in the error history (the last, of the undone attempt) is removed, and
-- last_error becomes the error of the record before it, if any. The
-- claim id is cleared, as claim_hand_back.sql does. It returns how many.
WITH l AS (
	SELECT queue, id FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND claim = @claim AND state IN ('pending', 'failed') AND ended = 'expired' AND attempt > 0
	ORDER BY id FOR UPDATE),
u AS (
	UPDATE /*schema*/leaserouter_jobs j SET state = 'pending', attempt = j.attempt - 1, requeued = j.attempt > 1,
		ended = CASE WHEN j.attempt > 1 THEN 'expired' ELSE 'released' END,
		last_error = CASE WHEN j.attempt = 1 THEN ''
			WHEN (j.errors -> -1 ->> 'attempt')::integer = j.attempt THEN coalesce(j.errors -> -2 ->> 'error', j.last_error)
			ELSE j.last_error END,
		errors = CASE WHEN (j.errors -> -1 ->> 'attempt')::integer = j.attempt
			THEN nullif(j.errors - -1, '[]'::jsonb) ELSE j.errors END,
		ready_at = j.ready_at - @lease_us * interval '1 microsecond', purge_at = NULL, claim = NULL,
		updated_at = clock_timestamp()
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND j.claim = @claim AND j.state IN ('pending', 'failed')
		AND j.ended = 'expired' AND j.attempt > 0
	RETURNING 1)
SELECT count(*) FROM u
