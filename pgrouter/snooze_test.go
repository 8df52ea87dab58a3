package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// dbNow is the database's clock.
func dbNow(t *testing.T, db *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, db.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now))
	return now
}

// rowOf reads job id's ready time and why its latest lease ended, from
// the table.
func rowOf(t *testing.T, db *pgxpool.Pool, id string) (readyAt time.Time, ended string) {
	t.Helper()
	require.NoError(t, db.QueryRow(context.Background(),
		"SELECT ready_at, ended FROM leaserouter_jobs WHERE id = $1", id).Scan(&readyAt, &ended))
	return readyAt, ended
}

// eventLog collects a Router's events (OnEvent).
type eventLog struct {
	mu  sync.Mutex
	evs []leaserouter.Event
}

func (e *eventLog) add(ev leaserouter.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

// of returns the events of kind k so far.
func (e *eventLog) of(k leaserouter.EventKind) []leaserouter.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []leaserouter.Event
	for _, ev := range e.evs {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// TestSnoozeDoesNotCountTheAttempt: a snoozed lease is not an attempt:
// the job's attempt goes back to what it was, so a job on its last
// attempt snoozes any number of times without becoming dead; its last
// error and checkpoint are kept for the next lease.
func TestSnoozeDoesNotCountTheAttempt(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{MaxAttempts: 2, Backoff: func(int) time.Duration { return 0 }})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(ctx, errors.New("boom")))
	for i := range 3 { // its last attempt, again and again
		l, err = r.TryAcquire(ctx, "w")
		require.NoError(t, err)
		require.Equal(t, 2, l.Attempt, "snooze %d", i)
		require.NoError(t, l.Heartbeat(ctx, []byte(fmt.Sprint("cp", i))))
		require.NoError(t, l.Snooze(ctx, 0))
		j, ok, err := r.Get(ctx, "a")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, leaserouter.StatePending, j.State, "snooze %d: not dead, whatever the attempts", i)
		require.Equal(t, 1, j.Attempt, "snooze %d: the snoozed lease is not counted", i)
		require.Equal(t, "boom", j.LastError, "the last error is kept")
		require.Equal(t, fmt.Sprint("cp", i), string(j.Progress), "the checkpoint is kept")
		require.Empty(t, j.Owner)
	}
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "cp2", string(l.Progress), "handed to the next lease")
	require.NoError(t, l.Fail(ctx, errors.New("again")))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, j.State, "its second counted attempt failed: dead")
	require.Equal(t, 2, j.Attempt)
}

// TestSnoozeSchedulesAtDatabaseNowPlusDelay: Snooze(d) schedules the job
// until the database's clock at the snooze + d (not leased before), and
// Snooze(0) makes it pending at once, ready since the snooze.
func TestSnoozeSchedulesAtDatabaseNowPlusDelay(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	const d = 300 * time.Millisecond

	l := leaseOn(t, r, "later")
	before := dbNow(t, db)
	require.NoError(t, l.Snooze(ctx, d))
	after := dbNow(t, db)
	j, _, err := r.Get(ctx, "later")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateScheduled, j.State)
	require.Equal(t, 0, j.Attempt)
	require.False(t, j.RunAt.Before(before.Add(d)), "run-at %v, database clock before the snooze %v", j.RunAt, before)
	require.False(t, j.RunAt.After(after.Add(d)), "run-at %v, database clock after the snooze %v", j.RunAt, after)
	_, ended := rowOf(t, db, "later")
	require.Equal(t, string(leaserouter.LostSnoozed), ended)
	if dbNow(t, db).Before(j.RunAt) {
		_, err = r.TryAcquire(ctx, "w")
		require.ErrorIs(t, err, leaserouter.ErrNoJob, "not ready before its run-at")
	}
	awaitDBTime(t, db, j.RunAt)
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err, "ready once the database's clock passed its run-at")
	require.Equal(t, "later", l.JobID)
	require.Equal(t, 1, l.Attempt)
	require.NoError(t, l.Complete(ctx))

	l = leaseOn(t, r, "now")
	before = dbNow(t, db)
	require.NoError(t, l.Snooze(ctx, 0))
	after = dbNow(t, db)
	j, _, err = r.Get(ctx, "now")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StatePending, j.State, "Snooze(0): pending at once")
	require.True(t, j.RunAt.IsZero())
	readyAt, _ := rowOf(t, db, "now")
	require.False(t, readyAt.Before(before) || readyAt.After(after), "ready since the snooze: %v not in [%v, %v]", readyAt, before, after)
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "now", l.JobID)
	require.Equal(t, 1, l.Attempt)
}

// TestSnoozeRefusesNegativeDelay: a negative delay is an error wrapping
// ErrInvalidOptions that changes nothing, checked before anything else
// (a nil lease gets it too, not a LeaseLostError).
func TestSnoozeRefusesNegativeDelay(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	err := l.Snooze(ctx, -time.Nanosecond)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.NotErrorIs(t, err, leaserouter.ErrLeaseLost)
	st, att := jobState(t, db, "a")
	require.Equal(t, leaserouter.StateLeased, st)
	require.Equal(t, 1, att)
	require.NoError(t, l.Heartbeat(ctx, nil), "the lease is still valid")
	require.NoError(t, l.Complete(ctx))
	var nilLease *pgrouter.Lease[int]
	require.ErrorIs(t, nilLease.Snooze(ctx, -time.Second), leaserouter.ErrInvalidOptions)
}

// TestSnoozeOfLostLeaseRefused: a lease no longer valid (expired, or
// superseded by a later lease of the job) is refused with a
// *LeaseLostError, changing nothing; after a snooze, every operation on
// the snoozed lease is refused with Reason LostSnoozed.
func TestSnoozeOfLostLeaseRefused(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 200 * time.Millisecond})
	ctx := t.Context()
	l1 := leaseOn(t, r, "a")
	awaitDBTime(t, db, l1.Expiry())
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l1.Snooze(ctx, 0), &lost)
	require.Equal(t, leaserouter.LostExpired, lost.Reason)
	l2, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 2, l2.Attempt, "the expiry counted the first attempt; the refused snooze took nothing back")
	require.ErrorAs(t, l1.Snooze(ctx, time.Minute), &lost)
	require.Equal(t, leaserouter.LostSuperseded, lost.Reason)
	require.Equal(t, l2.Token, lost.Current)
	st, att := jobState(t, db, "a")
	require.Equal(t, leaserouter.StateLeased, st, "the stale snooze changed nothing")
	require.Equal(t, 2, att)

	require.NoError(t, l2.Snooze(ctx, time.Minute))
	for name, op := range map[string]func() error{
		"Heartbeat": func() error { return l2.Heartbeat(ctx, nil) },
		"Complete":  func() error { return l2.Complete(ctx) },
		"Fail":      func() error { return l2.Fail(ctx, errors.New("x")) },
		"Release":   func() error { return l2.Release(ctx) },
		"Snooze":    func() error { return l2.Snooze(ctx, 0) },
	} {
		require.ErrorAs(t, op(), &lost, name)
		require.Equal(t, leaserouter.LostSnoozed, lost.Reason, name)
		require.Equal(t, l2.Token, lost.Current, name)
	}
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateScheduled, j.State, "still as the snooze left it")
	require.Equal(t, 1, j.Attempt)
}

// TestSnoozeEmitsEventAndCounts: a snooze emits EventSnoozed with its
// lease's fields at the database's instant of the change, counted in
// Stats.Snoozed; a refused one is neither.
func TestSnoozeEmitsEventAndCounts(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	var log eventLog
	r := routerOn[int](t, db, pgrouter.Options{OnEvent: log.add})
	l := leaseOn(t, r, "a")
	before := dbNow(t, db)
	require.NoError(t, l.Snooze(ctx, time.Minute))
	after := dbNow(t, db)
	require.Error(t, l.Snooze(ctx, time.Minute))
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.Snoozed)
	require.EqualValues(t, 1, s.Scheduled)
	require.NoError(t, r.Close(ctx)) // every event delivered
	evs := log.of(leaserouter.EventSnoozed)
	require.Len(t, evs, 1)
	e := evs[0]
	require.Equal(t, "a", e.JobID)
	require.Equal(t, "w", e.WorkerID)
	require.Equal(t, l.Token, e.Token)
	require.Equal(t, 1, e.Attempt, "the snoozed lease's attempt")
	require.False(t, e.Time.Before(before) || e.Time.After(after), "event at %v, not in [%v, %v]", e.Time, before, after)
	readyAt, _ := rowOf(t, db, "a")
	require.Equal(t, time.Minute, readyAt.Sub(e.Time), "scheduled a minute after the event's instant")
}

// TestRunSnoozesOnHandlerSnoozeError: a Run handler returning
// leaserouter.Snooze(d), wrapped or not, has its lease snoozed instead of
// failed: the job runs again after d on the database's clock, the
// attempt not counted (a job of one attempt is not dead), EventSnoozed
// emitted and counted.
func TestRunSnoozesOnHandlerSnoozeError(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var log eventLog
	r := routerOn[int](t, db, pgrouter.Options{MaxAttempts: 1, OnEvent: log.add})
	const d = 200 * time.Millisecond
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	var calls atomic.Int32
	var attempts [2]int
	err := r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(_ context.Context, l *pgrouter.Lease[int]) error {
		n := calls.Add(1)
		if n <= 2 {
			attempts[n-1] = l.Attempt
		}
		if n == 1 {
			return fmt.Errorf("not yet: %w", leaserouter.Snooze(d))
		}
		cancel()
		return nil
	})
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load(), "run again after the snooze")
	require.Equal(t, [2]int{1, 1}, attempts, "the snoozed attempt was not counted")
	j, _, err := r.Get(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.LastError, "a snooze is not a failure")
	s, err := r.Stats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, s.Snoozed)
	require.Zero(t, s.Retries+s.Dead)
	require.NoError(t, r.Close(t.Context()))
	snoozed, acquired := log.of(leaserouter.EventSnoozed), log.of(leaserouter.EventLeaseAcquired)
	require.Len(t, snoozed, 1)
	require.Len(t, acquired, 2)
	require.GreaterOrEqual(t, acquired[1].Time.Sub(snoozed[0].Time), d, "leased again d after the snooze, on the database's clock")
	require.Empty(t, log.of(leaserouter.EventFailed))
}

// TestRunSnoozesWhileStopping: a handler that returns Snooze after Run's
// ctx ended has its lease snoozed (it asked for it), not released: the
// attempt is not counted.
func TestRunSnoozesWhileStopping(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	err := r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, _ *pgrouter.Lease[int]) error {
		cancel()
		<-hctx.Done()
		return leaserouter.Snooze(0)
	})
	require.NoError(t, err)
	require.NoError(t, pgrouter.AwaitBackground(t.Context(), r))
	st, att := jobState(t, db, "a")
	require.Equal(t, leaserouter.StatePending, st)
	require.Equal(t, 0, att, "snoozed, not released (a release counts the attempt)")
	_, ended := rowOf(t, db, "a")
	require.Equal(t, string(leaserouter.LostSnoozed), ended)
}

// TestRunFailsNegativeSnooze: a handler returning Snooze with a negative
// delay fails its attempt with Snooze's error (ErrInvalidOptions): with
// one attempt the job is dead, its last error saying why.
func TestRunFailsNegativeSnooze(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, _ := newRouter[int](t, pgrouter.Options{MaxAttempts: 1, OnEvent: func(e leaserouter.Event) {
		if e.Kind == leaserouter.EventDead {
			cancel()
		}
	}})
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	err := r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(context.Context, *pgrouter.Lease[int]) error {
		return leaserouter.Snooze(-time.Second)
	})
	require.NoError(t, err)
	require.NoError(t, pgrouter.AwaitBackground(t.Context(), r))
	j, _, err := r.Get(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, j.State)
	require.Contains(t, j.LastError, "Snooze(-1s), must be >= 0")
	s, err := r.Stats(t.Context())
	require.NoError(t, err)
	require.Zero(t, s.Snoozed)
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
