-- lease_lock.sql in a caller's transaction: locks job @id's row only if
-- it still has the lease's token @token, so a caller whose lease was
-- superseded (or whose job is gone) never takes the row lock, even for a
-- moment; a lease past its expiry but not settled yet still does (until
-- the operation's savepoint is rolled back to: see completetx.go).
SELECT FROM /*schema*/leaserouter_jobs WHERE queue = @queue AND id = @id AND token = @token FOR UPDATE
