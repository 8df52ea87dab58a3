-- Makes job @id of @queue canceled if it is pending, scheduled or leased
-- (a lease ends with reason 'canceled'), purged @retention_us
-- microseconds later. It returns whether the queue knows the job (a
-- finished job past its retention is not known), and, if it was canceled
-- now: its token, attempt, the instant, the holder, whether it was
-- leased, and when that lease was granted (NULL before schema version 4).
WITH was AS (SELECT state, owner FROM leaserouter_jobs WHERE queue = @queue AND id = @id FOR UPDATE),
upd AS (
	UPDATE leaserouter_jobs j SET state = 'canceled', owner = '', lease_expires_at = NULL,
		ended = CASE WHEN j.state = 'leased' THEN 'canceled' ELSE j.ended END,
		updated_at = clock_timestamp(), purge_at = clock_timestamp() + @retention_us * interval '1 microsecond'
	FROM was
	WHERE j.queue = @queue AND j.id = @id AND j.state IN ('pending', 'scheduled', 'leased')
	RETURNING j.token, j.attempt, j.updated_at, was.owner, was.state = 'leased' AS leased, j.leased_at)
SELECT EXISTS (SELECT FROM upd) OR EXISTS (SELECT FROM leaserouter_jobs
		WHERE queue = @queue AND id = @id
			AND NOT leaserouter_past_retention(state, purge_at)),
	(SELECT token FROM upd), (SELECT attempt FROM upd), (SELECT updated_at FROM upd),
	(SELECT owner FROM upd), (SELECT leased FROM upd), (SELECT leased_at FROM upd)
