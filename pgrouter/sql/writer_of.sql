-- In the caller's transaction: its full ID and the xmin of job @id's row
-- version it sees; after a lease operation's update, the ID of the
-- (sub)transaction that wrote it (see completetx.go).
SELECT pg_current_xact_id()::text, xmin::text::bigint FROM /*schema*/leaserouter_jobs WHERE queue = @queue AND id = @id
