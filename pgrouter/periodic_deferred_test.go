package pgrouter_test

// Deferred periodic ticks (periodic_deferred.go): a tick a scheduler got to in
// time is enqueued once, whoever takes a younger tick first, and a tick
// whose transaction fails is tried again.

import (
	"context"
	"log/slog"
	"slices"
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

// tickTimes parses the ticks of name's jobs on queue, oldest first.
func tickTimes(t *testing.T, ids []string, name string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, id := range ids {
		tick, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(id, name+"@"))
		require.NoError(t, err, id)
		out = append(out, tick)
	}
	return out
}

// As long as one scheduler runs, each tick's job is enqueued, whoever
// takes a younger tick first: a scheduler B that ran all along found the
// row of ticks T1..Tn locked by a stalled scheduler's transaction and
// deferred them, to try again (up to 1s apart). The stalled transaction rolls back (its
// session ended) and another scheduler C starts (the stalled process
// restarted): it takes the latest due tick at once, before B's next try.
// B's deferred T1..Tn-1 are still taken, by B, once each.
func TestPeriodicDeferredTickTakenAfterAYoungerOne(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	const queue, name = "deferredlost", "p"
	p := pgrouter.Periodic[int]{Name: name, Schedule: leaserouter.Every(time.Second)}

	b := routerOn[int](t, db, pgrouter.Options{Queue: queue})
	require.NoError(t, b.AddPeriodic(ctx, p))
	eventually(t, 10*time.Second, "B's first tick", func() bool { return len(tickJobs(t, db, queue, name)) >= 1 })

	// The stalled scheduler: its tick's transaction locks the job's row.
	stalled, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = stalled.Rollback(ctx) }()
	_, err = stalled.Exec(ctx, "SELECT FROM leaserouter_periodic WHERE queue = $1 AND name = $2 FOR UPDATE", queue, name)
	require.NoError(t, err)
	before := tickTimes(t, tickJobs(t, db, queue, name), name)
	time.Sleep(3500 * time.Millisecond) // B defers 3 or 4 ticks, trying them again 1s apart

	c := routerOn[int](t, otherPool(t, db), pgrouter.Options{Queue: queue}) // the stalled process, back
	w := pgrouter.PeriodicWakes(b)
	awaitWakes(t, b, w+1) // B just tried its deferred ticks: its next try is ~1s away
	require.NoError(t, stalled.Rollback(ctx), "the stalled scheduler's session ends: its transaction rolls back")
	require.NoError(t, c.AddPeriodic(ctx, p))

	requireNoTickLost(t, db, queue, name, before)
}

// stallQuery is a pool's tracer that, once armed, stops the first
// statement sent through it that match reports, until released, and
// reports the stalled session's pid.
type stallQuery struct {
	match   func(sql string) bool
	armed   atomic.Bool
	pid     chan uint32 // cap 1
	release chan struct{}
	once    sync.Once
}

func newStallQuery(match func(sql string) bool) *stallQuery {
	return &stallQuery{match: match, pid: make(chan uint32, 1), release: make(chan struct{})}
}

func (s *stallQuery) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if s.match(d.SQL) && s.armed.CompareAndSwap(true, false) {
		s.pid <- conn.PgConn().PID()
		<-s.release
	}
	return ctx
}
func (s *stallQuery) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// poolOn returns a pool of db's server whose statements go through s,
// closed when t ends. Callers defer s.Release, so that a test that fails
// while a statement is stopped still ends (the deferred call runs before
// the cleanups that close the routers and the pool).
func (s *stallQuery) poolOn(t *testing.T, db *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	cfg := db.Config().Copy()
	cfg.ConnConfig.Tracer = s
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Release lets the stopped statement, and any later one, go on. It may be
// called more than once.
func (s *stallQuery) Release() { s.once.Do(func() { close(s.release) }) }

// stallInsert stops a job insert (inside a periodic tick's transaction,
// the tick taken: the process stalls locking the job's row).
func stallInsert() *stallQuery {
	return newStallQuery(func(sql string) bool { return strings.Contains(sql, "INSERT INTO leaserouter_jobs") })
}

// stallTick stops a periodic tick statement.
func stallTick() *stallQuery {
	return newStallQuery(func(sql string) bool {
		return strings.Contains(sql, "SKIP LOCKED") && strings.Contains(sql, "leaserouter_periodic")
	})
}

// The same with the stalled process itself: a scheduler A stopped inside
// its tick's transaction (the tick taken, the row locked) while B defers
// the ticks that come due; the server ends A's session (as the idle bound
// does, here just after one of B's tries), A resumes, its tick's
// transaction fails (A keeps that tick to try again) and it plans the
// latest due tick at once, before B's next try (1s apart). Every tick,
// the one A had taken and those B deferred, is enqueued, once.
func TestPeriodicResumedStalledSchedulerLeavesNoDeferredTickUntaken(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	const queue, name = "resumed", "p"
	p := pgrouter.Periodic[int]{Name: name, Schedule: leaserouter.Every(time.Second)}

	stall := stallInsert()
	aPool := stall.poolOn(t, db)
	defer stall.Release()
	a := routerOn[int](t, aPool, pgrouter.Options{Queue: queue})
	b := routerOn[int](t, otherPool(t, db), pgrouter.Options{Queue: queue})
	require.NoError(t, a.AddPeriodic(ctx, p))
	require.NoError(t, b.AddPeriodic(ctx, p))
	eventually(t, 10*time.Second, "a first tick", func() bool { return len(tickJobs(t, db, queue, name)) >= 1 })
	stall.armed.Store(true)
	var pid uint32
	select {
	case pid = <-stall.pid:
	case <-time.After(20 * time.Second):
		t.Fatal("A never took a tick")
	}
	before := tickTimes(t, tickJobs(t, db, queue, name), name)
	time.Sleep(3500 * time.Millisecond) // B defers 3 or 4 ticks, trying them again 1s apart

	w := pgrouter.PeriodicWakes(b)
	awaitWakes(t, b, w+1) // B just tried its deferred ticks: its next try is ~1s away
	var ok bool
	require.NoError(t, db.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&ok))
	require.True(t, ok, "A's session ended by the server")
	stall.Release()

	requireNoTickLost(t, db, queue, name, before)
}

// requireNoTickLost waits until the ticks of the periodic job name since
// those in before have their jobs, one a second with no gap, and at least
// six more than before (the stall's and a few after), failing after 20s.
// Real time, asserted generously: a scheduler tries its deferred ticks again
// about a second apart, later on a busy machine; a tick lost is lost for
// good, so its gap never fills.
func requireNoTickLost(t *testing.T, db *pgxpool.Pool, queue, name string, before []time.Time) {
	t.Helper()
	var ticks []time.Time
	var gaps []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ticks = tickTimes(t, tickJobs(t, db, queue, name), name)
		gaps = gaps[:0]
		for i := 1; i < len(ticks); i++ {
			if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
				gaps = append(gaps, ticks[i-1].Format("15:04:05")+" -> "+ticks[i].Format("15:04:05"))
			}
		}
		if len(gaps) == 0 && len(ticks) >= len(before)+6 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("before the stall %v\nall %v", before, ticks)
	require.Empty(t, gaps, "ticks lost while another scheduler ran and deferred them")
	require.GreaterOrEqual(t, len(ticks), len(before)+6, "the ticks of the stall and after it")
}

// RemovePeriodic stops the tries of the ticks the Router deferred: at most
// the one being tried as it is called is enqueued after it returns, not
// every deferred tick (here 3, the row freed as RemovePeriodic is called,
// while a wake-up is about to try them).
func TestPeriodicRemoveStopsTheDeferredTicks(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	const queue, name = "removedeferred", "p"

	stall := stallTick()
	aPool := stall.poolOn(t, db)
	defer stall.Release()
	a := routerOn[int](t, aPool, pgrouter.Options{Queue: queue})
	require.NoError(t, a.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: name, Schedule: leaserouter.Every(time.Second)}))
	eventually(t, 10*time.Second, "a first tick", func() bool { return len(tickJobs(t, db, queue, name)) >= 1 })

	stalled, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = stalled.Rollback(ctx) }()
	_, err = stalled.Exec(ctx, "SELECT FROM leaserouter_periodic WHERE queue = $1 AND name = $2 FOR UPDATE", queue, name)
	require.NoError(t, err)
	time.Sleep(3200 * time.Millisecond) // A defers 3 ticks
	stall.armed.Store(true)
	<-stall.pid // A's next try of its deferred ticks, about to be sent
	require.NoError(t, stalled.Rollback(ctx))
	n := len(tickJobs(t, db, queue, name))
	require.NoError(t, a.RemovePeriodic(name))
	stall.Release()
	time.Sleep(1500 * time.Millisecond)
	after := tickJobs(t, db, queue, name)
	t.Logf("before RemovePeriodic %d, after %v", n, after)
	require.LessOrEqual(t, len(after)-n, 1, "ticks enqueued after RemovePeriodic returned: %v", after[n:])
}

// A tick's COMMIT waits behind another transaction's notifying commit,
// as an Enqueue's does, and the tick the scheduler got to in time is
// enqueued: a transaction that notifies (the job's insert does) takes
// the cluster's one NOTIFY lock at its commit and holds it until its
// commit is durable, and the tick's lock_timeout (1s, for its
// statements) must not bound that wait. Here another process's notifying
// commit is slow to be durable (waiting for a synchronous standby; a
// stalled fsync does the same) for 3s; the first tick due after it
// began, tried by the only scheduler at once, is enqueued, and no tick's
// transaction fails.
func TestPeriodicTickCommitWaitsBehindASlowNotify(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t) // its own cluster: the settings below are the cluster's
	db := c.Pool(t)
	ctx := t.Context()
	const queue, name = "slownotify", "p"
	for _, s := range []string{"ALTER SYSTEM SET synchronous_standby_names = 'nobody'",
		"ALTER SYSTEM SET synchronous_commit = 'local'", "SELECT pg_reload_conf()"} {
		_, err := db.Exec(ctx, s)
		require.NoError(t, err)
	}
	time.Sleep(time.Second) // the reload reaches every process

	var logs logRecords
	r := routerOn[int](t, db, pgrouter.Options{Queue: queue, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: name, Schedule: leaserouter.Every(time.Second)}))
	eventually(t, 10*time.Second, "a first tick", func() bool { return len(tickJobs(t, db, queue, name)) >= 1 })

	// Another process's notifying commit, slow to be durable.
	slow, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer slow.Release()
	tx, err := slow.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT set_config('synchronous_commit', 'on', true), pg_notify('elsewhere', '')")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO leaserouter_periodic (queue, name) VALUES ('elsewhere', 'x')") // WAL to wait for
	require.NoError(t, err)
	committed := make(chan error, 1)
	go func() { committed <- tx.Commit(context.Background()) }()
	pid := slow.Conn().PgConn().PID()
	eventually(t, 10*time.Second, "the slow commit waiting for the standby", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'", pid).Scan(&n))
		return n == 1
	})
	began := dbNow(t, db)
	firstDue := leaserouter.Every(time.Second).Next(began)

	enqueued := make(chan error, 1)
	go func() { enqueued <- r.Enqueue(ctx, "plain", 1) }()
	time.Sleep(3 * time.Second)
	var cancelled bool
	require.NoError(t, db.QueryRow(ctx, "SELECT pg_cancel_backend($1)", int32(pid)).Scan(&cancelled))
	require.NoError(t, <-committed, "the slow commit, durable locally")
	require.NoError(t, <-enqueued, "an Enqueue behind the slow commit waits and succeeds")
	time.Sleep(2 * time.Second)

	ids := tickJobs(t, db, queue, name)
	require.Contains(t, ids, leaserouter.TickID(name, firstDue),
		"the first tick due after the slow commit began (%v), tried at once by the only scheduler; ticks: %v", firstDue, ids)
	require.Zero(t, logs.count("lock timeout"), "a tick's COMMIT failed behind the slow commit")
}

// A tick whose transaction fails is kept and tried again, before the
// scheduler plans on, until taken (or older than the retention), not
// planned again from the last tick as if woken late: here the tick's job
// insert waits on another transaction's uncommitted insert of the same
// ID past the tick's lock timeout (1s), for 3s, while younger ticks come
// due; once that transaction rolls back, the tick's job is enqueued.
func TestPeriodicFailedTickTriedAgain(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	const queue, name = "failedtick", "p"
	r := routerOn[int](t, db, pgrouter.Options{Queue: queue})
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: name, Schedule: leaserouter.Every(time.Second)}))
	eventually(t, 10*time.Second, "a first tick", func() bool { return len(tickJobs(t, db, queue, name)) >= 1 })

	tick := leaserouter.Every(time.Second).Next(dbNow(t, db).Add(time.Second))
	id := leaserouter.TickID(name, tick)
	other, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(context.Background()) }()
	require.NoError(t, r.EnqueueTx(ctx, other, id, 0, leaserouter.WithRunAt(tick)), "another transaction's insert of the tick's ID")
	awaitDBTime(t, db, tick.Add(3*time.Second))
	require.NoError(t, other.Rollback(ctx))
	eventually(t, 20*time.Second, "the tick's job", func() bool { return slices.Contains(tickJobs(t, db, queue, name), id) })
}

// breakable is s until broken, then a Schedule whose Next panics.
type breakable struct {
	s      leaserouter.Schedule
	broken *atomic.Bool
}

func (b breakable) Next(t time.Time) time.Time {
	if b.broken.Load() {
		panic("schedule broken")
	}
	return b.s.Next(t)
}

// A schedule that ends in this process (its Next panics) still settles
// the ticks its scheduler deferred: a tick deferred behind a stalled
// transaction when the schedule breaks is enqueued once that transaction
// ends.
func TestPeriodicEndedScheduleSettlesItsDeferredTicks(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	const queue, name = "endeddeferred", "p"
	tick := stalledTick(t, db, queue, name)
	stalled, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = stalled.Rollback(context.Background()) }()
	_, err = stalled.Exec(ctx, "SELECT FROM leaserouter_periodic WHERE queue = $1 AND name = $2 FOR UPDATE", queue, name)
	require.NoError(t, err)

	var broken atomic.Bool
	r := routerOn[int](t, db, pgrouter.Options{Queue: queue})
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: name, Schedule: breakable{onceAt{tick}, &broken}}))
	awaitWakes(t, r, 1) // the tick planned and its row found locked
	broken.Store(true)
	eventually(t, 10*time.Second, "the schedule's end (Next panicked), reported", func() bool {
		s, err := r.Stats(ctx)
		require.NoError(t, err)
		return s.CallbackPanics == 1
	})
	require.NoError(t, stalled.Rollback(ctx), "the stalled transaction ends")
	id := leaserouter.TickID(name, tick)
	eventually(t, 10*time.Second, "the deferred tick's job", func() bool { return slices.Contains(tickJobs(t, db, queue, name), id) })
}

// TestPeriodicRecordsOfARemovedJobArePruned: the records of the ticks
// taken of a periodic job no longer scheduled anywhere (removed, renamed)
// older than Retention are deleted by the queue's maintenance (only the
// taker of a later tick of the same job deleted them: they stayed
// forever).
func TestPeriodicRecordsOfARemovedJobArePruned(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	const queue, name = "growth", "p"
	opts := pgrouter.Options{Queue: queue, Retention: time.Second, PollInterval: 100 * time.Millisecond}
	a, err := pgrouter.New[int](ctx, db, opts)
	require.NoError(t, err)
	require.NoError(t, a.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: name, Schedule: leaserouter.Every(200 * time.Millisecond)}))
	count := func() (n int) {
		require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_periodic_ticks WHERE queue = $1 AND name = $2", queue, name).Scan(&n))
		return n
	}
	eventually(t, 10*time.Second, "ticks taken", func() bool { return count() >= 4 })
	require.NoError(t, a.RemovePeriodic(name))
	require.NoError(t, a.Close(ctx))
	time.Sleep(1500 * time.Millisecond) // every record older than Retention

	routerOn[int](t, db, opts) // a process of the queue, its maintenance running
	time.Sleep(5 * time.Second)
	require.Zero(t, count(), "records of ticks older than Retention, of a periodic job no longer scheduled")
}

// takeTick runs periodic_tick.sql for tick in its own transaction,
// committed, and returns taken and locked (another transaction locks the row).
func takeTick(t *testing.T, db *pgxpool.Pool, queue, name string, tick time.Time, retention time.Duration) (taken, locked bool) {
	t.Helper()
	tx, err := db.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	sql, names := pgrouter.Statement("periodic_tick")
	require.NoError(t, tx.QueryRow(t.Context(), sql, bindPositional(names, map[string]any{"queue": queue, "name": name, "tick": tick,
		"retention_us": retention.Microseconds(), "lock_timeout_ms": 1000, "idle_timeout_ms": 5000, "txn_timeout_ms": 5000})...).Scan(&taken, &locked))
	require.NoError(t, tx.Commit(t.Context()))
	return taken, locked
}

// TestPeriodicTickTakenOnceAcrossRetentions: schedulers of different
// Retentions never take a tick twice: one of a short Retention prunes the record of a tick taken by
// one of a long Retention, and raises taken_to over it.
func TestPeriodicTickTakenOnceAcrossRetentions(t *testing.T) {
	db := pgtest.New(t)
	const queue, name = "retentions", "p"
	now := stalledTick(t, db, queue, name) // since an hour ago
	old := now.Add(-30 * time.Minute)      // younger than the long Retention
	taken, _ := takeTick(t, db, queue, name, old, time.Hour)
	require.True(t, taken)
	taken, _ = takeTick(t, db, queue, name, now, time.Minute) // prunes old's record
	require.True(t, taken)
	taken, _ = takeTick(t, db, queue, name, old, time.Hour)
	require.False(t, taken, "a tick taken again after a shorter Retention's taker pruned its record")
}
