package pgrouter_test

import (
	"context"
	"os"
	"strings"
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

// TestKeepAliveNotStarvedByPool: with a pool of one connection held by
// the caller's transaction (the documented KeepAlive + Fence + CompleteTx
// pattern), KeepAlive's heartbeats go on, on a connection of their own,
// for longer than LeaseDuration both before CompleteTx (extending the
// lease) and after it (the open transaction proving it): KeepAlive's ctx
// is never canceled and the commit completes the job.
func TestKeepAliveNotStarvedByPool(t *testing.T) {
	const lease = time.Second
	db := poolOf(t, 1)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: lease})
	ctx := t.Context()
	_, err := db.Exec(ctx, "CREATE TABLE results (id text PRIMARY KEY, v int)")
	require.NoError(t, err)
	l := leaseOn(t, r, "a")
	kctx, cancel := pgrouter.KeepAlive(ctx, l, lease/5)
	defer cancel()
	work := func(what string) {
		t.Helper()
		select {
		case <-time.After(5 * lease / 2):
		case <-kctx.Done():
			t.Fatalf("KeepAlive's ctx canceled %s: %v", what, context.Cause(kctx))
		}
	}
	tx, err := db.Begin(kctx) // the pool's only connection
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	work("while the transaction held the pool's only connection")
	require.NoError(t, fencedWrite(kctx, tx, l))
	require.NoError(t, l.CompleteTx(kctx, tx))
	work("after CompleteTx, the transaction still open")
	require.NoError(t, tx.Commit(kctx))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
}

// TestKeepAliveOneStatementForAll: the leases a Router keeps alive are
// heartbeated together, one statement for all that are due, not one per
// lease; each stays alive past its first expiry.
func TestKeepAliveOneStatementForAll(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	var count heartbeatCounter
	cfg.ConnConfig.Tracer = &count
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close) // after the Router's Close
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 300 * time.Millisecond})
	ctx := t.Context()
	const n = 10
	enqueueJobs(t, r, "k", n)
	ls, err := r.TryAcquireMany(ctx, "w", n)
	require.NoError(t, err)
	require.Len(t, ls, n)
	var ctxs []context.Context
	for _, l := range ls {
		kctx, cancel := pgrouter.KeepAlive(ctx, l, 50*time.Millisecond)
		defer cancel()
		ctxs = append(ctxs, kctx)
	}
	awaitDBTime(t, base, ls[0].Expiry().Add(300*time.Millisecond))
	for i, kctx := range ctxs {
		require.NoError(t, kctx.Err(), "lease %d", i)
	}
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	stmts := count.n.Load()
	t.Logf("%d heartbeats in %d statements", s.Heartbeats, stmts)
	require.GreaterOrEqual(t, s.Heartbeats, uint64(5*n))
	require.Less(t, stmts*3, int64(s.Heartbeats), "heartbeats share statements")
	for _, l := range ls {
		require.NoError(t, l.Complete(ctx))
	}
}

// TestKeepAliveEdges: a second KeepAlive of a lease ends the first's
// context; a lease completed by its holder while kept alive is not
// reported lost; Close tells a kept lease it was revoked at once.
func TestKeepAliveEdges(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{LeaseDuration: 3 * time.Second})
	require.NoError(t, err)
	enqueueJobs(t, r, "k", 40)

	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	first, cancel1 := pgrouter.KeepAlive(ctx, l, time.Millisecond)
	defer cancel1()
	second, cancel2 := pgrouter.KeepAlive(ctx, l, time.Millisecond)
	defer cancel2()
	require.NoError(t, first.Err(), "a second KeepAlive coexists with the first")
	require.NoError(t, second.Err())

	// Completions racing 1ms heartbeat rounds: never a stale rejection.
	for range 30 {
		l, err := r.TryAcquire(ctx, "w")
		require.NoError(t, err)
		_, cancel := pgrouter.KeepAlive(ctx, l, time.Millisecond)
		require.NoError(t, l.Complete(ctx))
		cancel()
	}
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, s.StaleRejections)

	done, stop := context.WithCancel(ctx)
	stop()
	require.ErrorIs(t, r.Close(done), context.Canceled)
	select {
	case <-second.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a kept lease revoked by Close was not told")
	}
	// Told by Close, not by its expiry (3s: that cause is an error
	// wrapping ErrLeaseLost, not a *LeaseLostError).
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, context.Cause(second), &lost, "told by Close")
	require.Equal(t, leaserouter.LostRevoked, lost.Reason)
}

// heartbeatCounter counts the heartbeat statements a pool sends.
type heartbeatCounter struct{ n atomic.Int64 }

func (c *heartbeatCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "lease_expires_at = greatest(") {
		c.n.Add(1)
	}
	return ctx
}

func (c *heartbeatCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// notifyGate is a pool tracer that, once armed, pauses the first
// wake-up statement (notify.sql) until opened, and counts the heartbeat
// rounds' inspections (leases_inspect.sql) that end meanwhile.
type notifyGate struct {
	notify, inspect string
	armed           atomic.Bool
	paused          chan struct{} // closed when the notify is paused
	open            chan struct{} // closed by the test: the notify goes on
	once            sync.Once
	inspected       atomic.Int32
}

func (g *notifyGate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if g.armed.Load() && data.SQL == g.notify {
		g.once.Do(func() {
			close(g.paused)
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
		case <-g.paused:
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
	g := &notifyGate{notify: string(notify), inspect: string(inspect), paused: make(chan struct{}), open: make(chan struct{})}
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
	case <-g.paused: // the snooze committed; its wake-up, then its release, wait
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
