-- pgrouter:concurrent-index
-- pgrouter schema, version 16: List by kind (ListParams.Kinds). A
-- concurrent index build (see version 11).

-- List's order (version 6's leaserouter_jobs_order) for one kind: a page
-- of some kinds is a merge of walks, one per state and kind, that stop at
-- the page's end, never a walk past the jobs of other kinds.
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_kind_order ON leaserouter_jobs (queue, kind, state, seq);
