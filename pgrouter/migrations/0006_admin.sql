-- pgrouter schema, version 6: the operator's side (List, Pause, Resume,
-- Queues). Safe to apply again (IF NOT EXISTS): nothing it makes is
-- changed by a later version.

-- Queues paused by Router.Pause, in every process: the claim statement
-- grants nothing for a queue whose row says paused. A queue has a row
-- once it was paused or resumed; none means not paused.
CREATE TABLE IF NOT EXISTS /*schema*/leaserouter_queues (
	queue      text        PRIMARY KEY,
	paused     boolean     NOT NULL DEFAULT false,
	updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- List's order: a queue's jobs of one state, newest first (by enqueue
-- order, walked backward), so a page is a merge of at most six index
-- walks that stop at the page's end, never a sort of the queue. Building
-- it holds off writes to the jobs table while it reads the table (the
-- migration's transaction: CREATE INDEX CONCURRENTLY cannot run in one);
-- on a large table, create it CONCURRENTLY by hand first, under this
-- name: this statement then finds it.
CREATE INDEX IF NOT EXISTS leaserouter_jobs_order ON /*schema*/leaserouter_jobs (queue, state, seq);
