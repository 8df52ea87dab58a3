-- Deletes each job of @queue named in @ids that is not leased and is in
-- one of @states (their names): its row goes, so its ID may be enqueued
-- again. It runs after jobs_settle.sql in the same transaction, which
-- locked the rows in ID order and settled the expired leases among them,
-- so it waits for no row (a row enqueued since and locked by another
-- transaction is skipped, as if the call had come before it): a bulk call
-- never deadlocks with another or with Run's completions. Each job is
-- judged by its state then, a dead job retried meanwhile seen pending. It
-- returns a row per job of @ids the queue knows (a finished job past its
-- retention is not known): its ID, its state before, its token (the
-- lease's, for a leased job) and holder, whether it was deleted now and
-- then its attempt; and the instant. Delete is this
-- statement with one ID and every state; DeleteMany, with the IDs and
-- states an operator chose.
WITH was AS (
	SELECT id, state, token, owner FROM /*schema*/leaserouter_jobs
	WHERE queue = @queue AND id = ANY(@ids::text[]) AND NOT /*schema*/leaserouter_past_retention(state, purge_at)
	ORDER BY id
	FOR UPDATE SKIP LOCKED),
d AS (
	DELETE FROM /*schema*/leaserouter_jobs j USING was
	WHERE j.queue = @queue AND j.id = was.id AND was.state <> 'leased'
		AND was.state = ANY(@states::text[]::/*schema*/leaserouter_job_state[])
	RETURNING j.id, j.attempt)
SELECT was.id, was.state::text, was.token, was.owner, d.id IS NOT NULL, d.attempt, clock_timestamp()
FROM was LEFT JOIN d USING (id)
