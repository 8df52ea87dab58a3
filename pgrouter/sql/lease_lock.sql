-- Locks job @id's row (if it exists) until the end of the transaction,
-- before a lease operation on it runs in the same one: so the operation's
-- clock reading, its check and its report all come after the lock is
-- taken, even when another transaction locked the row without changing it
-- (a SELECT ... FOR UPDATE), which would let a lone UPDATE go on with the
-- clock it read before waiting.
SELECT FROM /*schema*/leaserouter_jobs WHERE queue = @queue AND id = @id FOR UPDATE
