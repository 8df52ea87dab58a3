package pgrouter_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestJobTimeoutFromGetAndList: a job's WithTimeout is stored (in
// microseconds, a positive one rounded up so it stays positive) and read
// back as Job.Timeout by Get and List, for every way of enqueueing; 0 when
// not given; a job that replaces a purged one of the same ID has its own.
func TestJobTimeoutFromGetAndList(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{Retention: -1})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "one", 1, leaserouter.WithTimeout(1500*time.Millisecond)))
	require.NoError(t, r.Enqueue(ctx, "none", 1))
	require.NoError(t, r.Enqueue(ctx, "tiny", 1, leaserouter.WithTimeout(time.Nanosecond)))
	_, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[int]{
		{ID: "many1", Options: []leaserouter.EnqueueOption{leaserouter.WithTimeout(2 * time.Second)}},
		{ID: "many2"},
		{ID: "many3", Options: []leaserouter.EnqueueOption{leaserouter.WithTimeout(3 * time.Minute)}},
	})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		return r.EnqueueTx(ctx, tx, "tx", 1, leaserouter.WithTimeout(4*time.Second))
	}))
	want := map[string]time.Duration{"one": 1500 * time.Millisecond, "none": 0, "tiny": time.Microsecond,
		"many1": 2 * time.Second, "many2": 0, "many3": 3 * time.Minute, "tx": 4 * time.Second}
	for id, d := range want {
		j, ok, err := r.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, d, j.Timeout, "Get %s", id)
	}
	page, err := r.List(ctx, leaserouter.ListParams{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, len(want))
	for _, j := range page.Jobs {
		require.Equal(t, want[j.ID], j.Timeout, "List %s", j.ID)
	}
	ls, err := r.TryAcquireMany(ctx, "w", len(want))
	require.NoError(t, err)
	require.Len(t, ls, len(want))
	leased, err := r.Leases(ctx, len(want))
	require.NoError(t, err)
	require.Len(t, leased, len(want))
	for _, j := range leased {
		require.Equal(t, want[j.ID], j.Timeout, "Leases %s", j.ID)
	}
	for _, l := range ls {
		require.NoError(t, l.Complete(ctx))
	}

	// Finished and dropped at once (Retention -1): an Enqueue of the same
	// ID takes its row, with its own timeout.
	require.NoError(t, r.Enqueue(ctx, "one", 1))
	j, ok, err := r.Get(ctx, "one")
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, j.Timeout, "the new job's, not the purged one's")
	require.NoError(t, r.Enqueue(ctx, "none", 1, leaserouter.WithTimeout(time.Second)))
	j, _, err = r.Get(ctx, "none")
	require.NoError(t, err)
	require.Equal(t, time.Second, j.Timeout)
}

// TestWithTimeoutAtItsLargestStaysALimit: WithTimeout(math.MaxInt64), the
// largest limit a caller can give (a job that must not be cut short by
// WorkerOptions.Timeout), reads back as a positive limit from Get, and
// Run applies it rather than the worker's much shorter Timeout. Stored in
// microseconds rounded up, it is one microsecond more than a Duration
// holds: read back naively it wraps to a negative Duration.
func TestWithTimeoutAtItsLargestStaysALimit(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx, cancel := context.WithCancel(t.Context()) // no deadline of its own: the handler's is the attempt's limit
	defer cancel()
	require.NoError(t, r.Enqueue(ctx, "long", 1, leaserouter.WithTimeout(math.MaxInt64)))
	j, ok, err := r.Get(ctx, "long")
	require.NoError(t, err)
	require.True(t, ok)
	require.Greater(t, j.Timeout, 24*time.Hour, "Job.Timeout of WithTimeout(math.MaxInt64)")

	var deadline time.Time
	var has bool
	err = r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, Timeout: time.Minute}, func(hctx context.Context, _ *pgrouter.Lease[int]) error {
		deadline, has = hctx.Deadline()
		cancel()
		return nil
	})
	require.NoError(t, err)
	require.True(t, has)
	require.True(t, deadline.After(time.Now().Add(24*time.Hour)),
		"the handler's deadline %v: the job's WithTimeout(math.MaxInt64) must override WorkerOptions.Timeout (1m)", deadline)
}

// oldInsertJobs is sql/jobs_insert.sql as pgrouter ran it before
// migration 0009 (commit edbafcd): what a process of the older version,
// which the migration's header says keeps working, sends on the new
// schema.
const oldInsertJobs = `WITH c AS (SELECT clock_timestamp() AS now),
old AS (
	SELECT id, token, attempt, purge_at FROM leaserouter_jobs
	WHERE queue = @queue AND id = ANY (@ids::text[]) AND state IN ('succeeded', 'failed', 'canceled')),
v AS (
	SELECT x.*, nextval('leaserouter_job_seq') AS seq
	FROM (SELECT r.id, r.priority, r.max_attempts, r.payload, c.now,
			CASE WHEN r.run_at IS NOT NULL THEN greatest(r.run_at, c.now)
				ELSE c.now + r.delay_us * interval '1 microsecond' END AS ready
		FROM unnest(@ids::text[], @priorities::bigint[], @max_attempts::integer[], @payloads::text[],
				@run_at::timestamptz[], @delay_us::bigint[])
			WITH ORDINALITY AS r(id, priority, max_attempts, payload, run_at, delay_us, ord), c
		ORDER BY r.ord) x),
ins AS (
	INSERT INTO leaserouter_jobs AS j (queue, id, seq, state, priority, ready_at, max_attempts, payload, created_at, updated_at)
	SELECT @queue, id, seq, CASE WHEN ready > now THEN 'scheduled'::leaserouter_job_state ELSE 'pending'::leaserouter_job_state END,
		priority, ready, max_attempts, payload::jsonb, now, now
	FROM v ORDER BY id
	ON CONFLICT (queue, id) DO UPDATE SET
		seq = excluded.seq, state = excluded.state, priority = excluded.priority, ready_at = excluded.ready_at,
		requeued = false, attempt = 0, max_attempts = excluded.max_attempts, token = 0, owner = '',
		lease_expires_at = NULL, ended = '', payload = excluded.payload, progress = NULL, last_error = '',
		created_at = excluded.created_at, updated_at = excluded.updated_at, purge_at = NULL
	WHERE leaserouter_past_retention(j.state, j.purge_at)
	RETURNING j.id, j.created_at, NOT (j.xmax = 0) AS replaced),
n AS (SELECT pg_notify(@channel, @queue) FROM (SELECT FROM ins LIMIT 1) one)
SELECT ins.id, ins.created_at, (SELECT count(*) FROM n), o.token, o.attempt, o.purge_at
FROM ins LEFT JOIN old o ON ins.replaced AND o.id = ins.id`

// TestOlderProcessReenqueueHasNoStaleTimeout: a process of the version
// before migration 0009 (which knows nothing of timeouts) enqueues an ID
// whose finished job, past its retention, had WithTimeout: its new job
// has no per-attempt limit, not the purged job's (Run would cut the new
// job's handler at a limit nobody gave it).
func TestOlderProcessReenqueueHasNoStaleTimeout(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{Retention: -1})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "x", 1, leaserouter.WithTimeout(time.Second)))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Complete(ctx)) // finished, and past its retention at once
	rows, err := db.Query(ctx, oldInsertJobs, pgx.NamedArgs{"queue": "default", "channel": "leaserouter_old_version", "ids": []string{"x"},
		"priorities": []int64{0}, "max_attempts": []int32{3}, "payloads": []string{"2"}, "run_at": []*time.Time{nil},
		"delay_us": []int64{0}})
	require.NoError(t, err)
	ids := 0
	for rows.Next() {
		ids++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 1, ids, "the older process's enqueue replaced the purged job")
	j, ok, err := r.Get(ctx, "x")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 2, j.Payload)
	require.Zero(t, j.Timeout, "the older process's job was given no WithTimeout")
}
