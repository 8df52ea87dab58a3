-- Reads the rows of jobs @ids of @queue without locking them: ID, current
-- token, state, why the latest lease ended. A job whose row is gone
-- (purged) has no row.
SELECT id, token, state::text, ended FROM leaserouter_jobs WHERE queue = @queue AND id = ANY(@ids::text[])
