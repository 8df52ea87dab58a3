-- pgrouter schema, version 20: Run's completions at a Retention below
-- zero delete their jobs' rows at once (one heap and index change per
-- job fewer than completing the row and purging it later), and leave a
-- record per statement here, so that a completion whose reply was lost
-- learns from its retry that it ended its lease, with no row left to
-- read. Safe to apply again (IF NOT EXISTS); a process of an earlier
-- version never reads or writes it (its completions update the row, and
-- its purge deletes it later, as before).

-- One row per statement that deleted completed jobs: its random id (op),
-- the instant, and each lease it ended (token, ended instant; tokens are
-- unique within the schema: one sequence draws them for every queue). A retry names the ids of its earlier
-- statements whose outcome it did not see, and reads their records. Kept
-- ten minutes (the maintenance loop deletes older rows).
CREATE TABLE IF NOT EXISTS /*schema*/leaserouter_ended (
	op     bigint        PRIMARY KEY,
	at     timestamptz   NOT NULL,
	tokens bigint[]      NOT NULL,
	ats    timestamptz[] NOT NULL
);

-- The maintenance loop's purge finds the records past their keep by
-- their instant, without reading the younger ones (up to ten minutes of
-- completions).
CREATE INDEX IF NOT EXISTS leaserouter_ended_at ON /*schema*/leaserouter_ended (at);
