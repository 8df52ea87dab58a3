package pgrouter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestRunCleanReportsNoStaleRejections: a clean Run (one process, no
// zombies, nothing lost) counts and reports no stale rejection, though
// heartbeat rounds race with handlers returning.
func TestRunCleanReportsNoStaleRejections(t *testing.T) {
	var stale, completed atomic.Int64
	r, _ := newRouter[int](t, pgrouter.Options{LeaseDuration: 3 * time.Second, OnEvent: func(e leaserouter.Event) {
		switch e.Kind {
		case leaserouter.EventStaleRejected:
			stale.Add(1)
		case leaserouter.EventCompleted:
			completed.Add(1)
		}
	}})
	ctx := t.Context()
	const n = 3000
	enqueueJobs(t, r, "j", n)
	var ran atomic.Int64
	stop := make(chan struct{})
	var once sync.Once
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 4, Batch: 8, HeartbeatInterval: 5 * time.Millisecond}, stop,
		func(_ context.Context, l *pgrouter.Lease[int]) error {
			time.Sleep(200 * time.Microsecond)
			if ran.Add(1) == n {
				once.Do(func() { close(stop) })
			}
			return nil
		})
	require.NoError(t, err)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	t.Logf("succeeded=%d stale events=%d StaleRejections=%d HeartbeatsRefused=%d", s.Succeeded, stale.Load(), s.StaleRejections, s.HeartbeatsRefused)
	require.Zero(t, s.StaleRejections, "no lease was lost in this run")
}

// TestEventCompleteTxReportsNothingBeforeCommit: CompleteTx emits no
// event (the Router cannot see the commit): a rolled-back one leaves no
// completed event, and the lease's later Complete reports the one.
func TestEventCompleteTxReportsNothingBeforeCommit(t *testing.T) {
	var mu sync.Mutex
	var kinds []string
	r, db := newRouter[int](t, pgrouter.Options{OnEvent: func(e leaserouter.Event) {
		mu.Lock()
		kinds = append(kinds, e.Kind.String())
		mu.Unlock()
	}})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, l.CompleteTx(ctx, tx))
	require.NoError(t, tx.Rollback(ctx))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateLeased, j.State)
	require.NoError(t, l.Complete(ctx))
	require.NoError(t, r.Close(ctx), "delivers every event")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("events: %v", kinds)
	require.Equal(t, []string{"enqueued", "lease_acquired", "completed"}, kinds)
}

// TestEventSlowHookDoesNotExpireFinishedJobs: with a slow OnEvent, a Run
// worker waits for room before it takes its finished jobs, so the
// heartbeat rounds complete them: none expires, none runs again.
func TestEventSlowHookDoesNotExpireFinishedJobs(t *testing.T) {
	gate := make(chan struct{})
	var armed atomic.Bool
	db := pgtest.New(t)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: time.Second, PollInterval: 100 * time.Millisecond,
		OnEvent: func(e leaserouter.Event) {
			if armed.Load() && e.JobID == "first-0" {
				<-gate
			}
		}})
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	ctx := t.Context()
	batch := func(prefix string) []leaserouter.JobSpec[int] {
		s := make([]leaserouter.JobSpec[int], 5000)
		for i := range s {
			s[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint(prefix, i), Payload: i, Options: []leaserouter.EnqueueOption{leaserouter.WithDelay(time.Hour)}}
		}
		return s
	}
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	var runs atomic.Int64
	enqueued := make(chan error, 2) // the handler's EnqueueMany results, checked in the test's goroutine
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- r.Run(rctx, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
			if l.JobID != "a" {
				return nil
			}
			if runs.Add(1) == 1 {
				armed.Store(true)
				_, err := r.EnqueueMany(context.Background(), batch("first-"))
				enqueued <- err
				time.Sleep(100 * time.Millisecond)
				_, err = r.EnqueueMany(context.Background(), batch("second-"))
				enqueued <- err
			}
			return nil // finished well within its lease
		})
	}()
	time.Sleep(3 * time.Second) // real time: three leases pass on the database's clock
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	t.Logf("after 3s with the hook blocked: job a is %v (attempt %d)", j.State, j.Attempt)
	close(gate)
	cancel()
	require.NoError(t, <-done)
	for _, which := range []string{"first", "second"} {
		select {
		case err := <-enqueued:
			require.NoError(t, err, "the handler's %s EnqueueMany", which)
		default:
			t.Fatalf("the handler's %s EnqueueMany did not run", which)
		}
	}
	t.Logf("handler ran %d times for job a", runs.Load())
	require.Equal(t, leaserouter.StateSucceeded, j.State, "a finished job must be completed without waiting for hooks")
	require.EqualValues(t, 1, runs.Load())
}
