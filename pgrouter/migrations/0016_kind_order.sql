-- pgrouter:concurrent-index
-- pgrouter schema, version 16: List by kind (ListParams.Kinds). A
-- concurrent index build (see version 11).

-- List's order (version 6's leaserouter_jobs_order) for one kind, of the
-- jobs that have one: a page of some kinds is a merge of walks, one per
-- state and kind, that stop at the page's end, never a walk past the
-- jobs of other kinds. Partial: the jobs of kind "" (a Router's that
-- sets no Kind, and every job of earlier versions) are not in it, so a
-- queue of Routers pays no index write for it (measured: 14% more WAL a
-- job through Run, 13% more an enqueued row, with every job in it); List
-- of kind "" walks leaserouter_jobs_order, filtering the kind.
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaserouter_jobs_kind_order ON /*schema*/leaserouter_jobs (queue, kind, state, seq) WHERE (kind <> ''::text);
