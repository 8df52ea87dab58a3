-- Reads the rows of jobs @ids of @queue without locking them: ID, current
-- token, state, why the latest lease ended, and whether the lease it
-- shows is unexpired on the database's clock (false if none). A job whose
-- row is gone (purged) has no row.
SELECT id, token, state::text, ended, coalesce(lease_expires_at > clock_timestamp(), false)
FROM /*schema*/leaserouter_jobs WHERE queue = @queue AND id = ANY(@ids::text[])
