package pgrouter_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

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

// TestPeriodicFailingTickDoesNotStarveOthers: one periodic job whose tick
// the database refuses every time (its payload is JSON that jsonb does not
// take: a lone surrogate escape) must not stop this Router's other
// periodic jobs: each is scheduled on its own.
func TestPeriodicFailingTickDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	r, db := newRouter[json.RawMessage](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[json.RawMessage]{Name: "bad", Schedule: leaserouter.Every(time.Second),
		Payload: func(time.Time) json.RawMessage { return json.RawMessage(`"\ud800"`) }}))
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[json.RawMessage]{Name: "good", Schedule: leaserouter.Every(time.Second),
		Payload: func(time.Time) json.RawMessage { return json.RawMessage(`1`) }}))
	from := dbNow(t, db)
	awaitDBTime(t, db, from.Add(4*time.Second))
	// Ticks at 1s: at least three of the four whole seconds lived across,
	// asserted generously (the bug leaves at most one).
	require.GreaterOrEqual(t, len(tickJobs(t, db, "default", "good")), 3, "ticks of the healthy periodic job")
	require.Empty(t, tickJobs(t, db, "default", "bad"))
}

// TestRunFailsNegativeSnoozeWhileStopping: Run's doc (and the core) say a
// handler returning Snooze with a negative delay fails its attempt with
// Snooze's error, whether or not Run is stopping: with one attempt the
// job is dead with that error, not released ('attempts exhausted').
func TestRunFailsNegativeSnoozeWhileStopping(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{MaxAttempts: 1})
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	err := r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, _ *pgrouter.Lease[int]) error {
		cancel()
		<-hctx.Done()
		return leaserouter.Snooze(-time.Second)
	})
	require.NoError(t, err)
	require.NoError(t, pgrouter.AwaitBackground(t.Context(), r))
	j, _, err := r.Get(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, j.State)
	require.Contains(t, j.LastError, "Snooze(-1s), must be >= 0")
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
	rows, err := db.Query(ctx, oldInsertJobs, pgx.NamedArgs{"queue": "default", "channel": "leaserouter_review", "ids": []string{"x"},
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

// notifyGate is a pool tracer that, once armed, holds the first
// wake-up statement (notify.sql) until opened, and counts the heartbeat
// rounds' inspections (leases_inspect.sql) that end meanwhile.
type notifyGate struct {
	notify, inspect string
	armed           atomic.Bool
	held            chan struct{} // closed when the notify is held
	open            chan struct{} // closed by the test: the notify goes on
	once            sync.Once
	inspected       atomic.Int32
}

func (g *notifyGate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if g.armed.Load() && data.SQL == g.notify {
		g.once.Do(func() {
			close(g.held)
			select {
			case <-g.open:
			case <-time.After(10 * time.Second):
			}
		})
	}
	return context.WithValue(ctx, g, data.SQL)
}

func (g *notifyGate) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if sql, _ := ctx.Value(g).(string); sql == g.inspect && g.armed.Load() {
		select {
		case <-g.held:
			g.inspected.Add(1)
		default:
		}
	}
}

// TestSnoozeRacingHeartbeatIsNoRefusal: a heartbeat round (KeepAlive)
// that finds the lease ended by its holder's own Snooze, the Snooze not
// yet returned, is no refusal, as for Complete, Fail and Release: no
// EventStaleRejected, no StaleRejections or HeartbeatsRefused, and the
// KeepAlive ctx ends with the holder's end as its cause (Reason
// LostSnoozed), as contract.EndedByHolder says for every backend.
func TestSnoozeRacingHeartbeatIsNoRefusal(t *testing.T) {
	base := pgtest.New(t)
	// The statements as the Router passes them to pgx: the files' text.
	notify, err := os.ReadFile("sql/notify.sql")
	require.NoError(t, err)
	inspect, err := os.ReadFile("sql/leases_inspect.sql")
	require.NoError(t, err)
	g := &notifyGate{notify: string(notify), inspect: string(inspect), held: make(chan struct{}), open: make(chan struct{})}
	cfg := base.Config()
	cfg.ConnConfig.Tracer = g
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	var log eventLog
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 5 * time.Second, OnEvent: log.add})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	kctx, stop := pgrouter.KeepAlive(ctx, l, 50*time.Millisecond)
	defer stop()

	g.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- l.Snooze(ctx, time.Hour) }()
	select {
	case <-g.held: // the snooze committed; its wake-up, then its release, wait
	case <-time.After(10 * time.Second):
		t.Fatal("Snooze's wake-up not reached")
	}
	// A round that finds the lease snoozed, then one more (each inspects):
	// the first one's verdict is in. Or the first ended the KeepAlive.
	eventually(t, 10*time.Second, "two heartbeat rounds, or the KeepAlive ended", func() bool {
		return g.inspected.Load() >= 2 || kctx.Err() != nil
	})
	close(g.open)
	require.NoError(t, <-done)
	require.Error(t, kctx.Err(), "the holder's Snooze has returned: its KeepAlive ctx has ended")
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, context.Cause(kctx), &lost)
	require.Equal(t, leaserouter.LostSnoozed, lost.Reason, "KeepAlive's ctx ends with the holder's end: %v", context.Cause(kctx))
	stop()
	require.NoError(t, r.Close(ctx)) // every event delivered
	require.Empty(t, log.of(leaserouter.EventStaleRejected), "a refusal reported for the holder's own snooze")
	s, err := r.Stats(t.Context())
	require.NoError(t, err)
	require.Zero(t, s.StaleRejections)
	require.Zero(t, s.HeartbeatsRefused)
	require.EqualValues(t, 1, s.Snoozed)
}
