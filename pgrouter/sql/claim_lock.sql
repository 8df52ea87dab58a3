-- The advisory lock on a claim's or a lease operation's id (@id) for its
-- transaction: the first statement of its batch, so that the statements
-- after it read the abandoned marks with the lock held. A resolver of the
-- claim or operation waits for it (see outcome.go).
SELECT pg_advisory_xact_lock(@id)
