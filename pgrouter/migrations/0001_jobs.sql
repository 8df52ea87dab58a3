-- pgrouter schema, version 1: the jobs table, the fence table and the
-- fencing-token sequence. State values are leaserouter.State's:
-- 0 pending, 1 scheduled, 2 leased, 3 succeeded, 4 failed (dead),
-- 5 canceled.

CREATE SEQUENCE /*schema*/leaserouter_token AS bigint CACHE 1;

-- Enqueue order. Taken explicitly by the enqueue statement, in the
-- batch's order, before its rows are inserted in ID order (the order
-- every batch locks rows in, so concurrent batches never deadlock).
CREATE SEQUENCE /*schema*/leaserouter_job_seq AS bigint;

CREATE TABLE /*schema*/leaserouter_jobs (
	queue            text        NOT NULL,
	id               text        NOT NULL,
	seq              bigint      NOT NULL DEFAULT nextval('/*schema*/leaserouter_job_seq'), -- enqueue order, the last tie-breaker
	state            smallint    NOT NULL,
	priority         bigint      NOT NULL DEFAULT 0,
	ready_at         timestamptz NOT NULL,           -- pending: ready time; scheduled: run-at
	requeued         boolean     NOT NULL DEFAULT false, -- pending again because a lease expired
	attempt          integer     NOT NULL DEFAULT 0, -- leases granted so far
	max_attempts     integer     NOT NULL,
	token            bigint      NOT NULL DEFAULT 0, -- fencing token of the latest lease
	owner            text        NOT NULL DEFAULT '',
	lease_expires_at timestamptz,                    -- set while leased
	ended            text        NOT NULL DEFAULT '', -- why the latest lease ended (a LostReason)
	payload          jsonb       NOT NULL,
	progress         bytea,                          -- the last checkpoint
	last_error       text        NOT NULL DEFAULT '',
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	purge_at         timestamptz,                    -- finished: when retention ends
	PRIMARY KEY (queue, id)
) WITH (
	-- every job is updated several times and then deleted: vacuum early
	-- and without sleeping, so dead tuples do not slow the claims
	autovacuum_vacuum_scale_factor = 0.02,
	autovacuum_vacuum_insert_scale_factor = 0.02,
	autovacuum_analyze_scale_factor = 0.05,
	autovacuum_vacuum_cost_delay = 0,
	fillfactor = 85
);

CREATE INDEX leaserouter_jobs_ready ON /*schema*/leaserouter_jobs (queue, priority DESC, ready_at, seq) WHERE state = 0;
CREATE INDEX leaserouter_jobs_scheduled ON /*schema*/leaserouter_jobs (queue, ready_at) WHERE state = 1;
CREATE INDEX leaserouter_jobs_leased ON /*schema*/leaserouter_jobs (queue, lease_expires_at) WHERE state = 2;
CREATE INDEX leaserouter_jobs_purge ON /*schema*/leaserouter_jobs (queue, purge_at) WHERE state >= 3;

CREATE TABLE /*schema*/leaserouter_fences (
	key   text   PRIMARY KEY,
	token bigint NOT NULL
);
