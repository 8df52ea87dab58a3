-- pgrouter schema, version 4: the instant the job's latest lease was
-- granted, so an event that ends a lease in any process (lease_expired
-- from whichever process settles it, canceled) reports how long it was
-- held (Event.Held), on the database's clock. Only adds a column (NULL
-- for leases granted before this version: their Held is 0).
ALTER TABLE /*schema*/leaserouter_jobs ADD COLUMN IF NOT EXISTS leased_at timestamptz;
