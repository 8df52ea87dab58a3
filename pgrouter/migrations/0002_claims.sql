-- pgrouter schema, version 2: claims whose outcome a client could not
-- see (the reply lost, the call's ctx ended) are resolved by reading their
-- rows back.

-- The claim (a random id per claim statement) that granted the job's
-- latest lease: its leases can be found, and handed back, by a client
-- that never saw the claim's reply.
ALTER TABLE /*schema*/leaserouter_jobs ADD COLUMN claim bigint;

-- Claims given up by the client that sent them: a claim statement whose
-- id is here claims nothing, so a claim that reaches the server after
-- its client resolved it (held in the network, say) cannot grant a lease
-- nobody receives. Kept a day (the maintenance loop deletes older rows).
CREATE TABLE /*schema*/leaserouter_abandoned_claims (
	id bigint      PRIMARY KEY,
	at timestamptz NOT NULL DEFAULT clock_timestamp()
);
