package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// runUntil runs r.Run with opts and h until stop is closed (or 20s pass,
// failing t), and returns Run's error.
func runUntil[T any](t *testing.T, r *pgrouter.Router[T], opts leaserouter.WorkerOptions, stop <-chan struct{}, h pgrouter.Handler[T]) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, opts, h) }()
	select {
	case <-stop:
	case <-time.After(20 * time.Second):
		t.Error("Run did not finish its work within 20s")
	}
	cancel()
	return <-done
}

// TestRunProcessesEveryJobOnce: Run's workers lease in batches and
// complete every job once.
func TestRunProcessesEveryJobOnce(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	const n = 300
	specs := make([]leaserouter.JobSpec[int], n)
	for i := range specs {
		specs[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i), Payload: i}
	}
	_, err := r.EnqueueMany(ctx, specs)
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[int]int{}
	stop := make(chan struct{})
	err = runUntil(t, r, leaserouter.WorkerOptions{Workers: 2, Batch: 32}, stop, func(_ context.Context, l *pgrouter.Lease[int]) error {
		mu.Lock()
		defer mu.Unlock()
		seen[l.Payload]++
		if len(seen) == n {
			close(stop)
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, seen, n)
	for p, c := range seen {
		require.Equal(t, 1, c, "job %d ran %d times", p, c)
	}
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, n, s.Succeeded, "every job completed, the last ones by the stopping workers")
	require.Zero(t, s.Pending+s.Leased)
}

// TestRunFailsRetriesAndRecoversPanics: an error fails the attempt (and
// the job is retried), a panic too, with its message kept.
func TestRunFailsRetriesAndRecoversPanics(t *testing.T) {
	r, _ := newRouter[string](t, pgrouter.Options{Backoff: func(int) time.Duration { return 0 }})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "err", "err"))
	require.NoError(t, r.Enqueue(ctx, "panic", "panic"))
	var finished atomic.Int32
	stop := make(chan struct{})
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 1}, stop, func(_ context.Context, l *pgrouter.Lease[string]) error {
		if l.Attempt == 1 {
			if l.Payload == "panic" {
				panic("kaboom")
			}
			return errors.New("first attempt fails")
		}
		if finished.Add(1) == 2 {
			close(stop)
		}
		return nil
	})
	require.NoError(t, err)
	for _, id := range []string{"err", "panic"} {
		j, ok, err := r.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, leaserouter.StateSucceeded, j.State)
		require.Equal(t, 2, j.Attempt)
	}
	j, _, err := r.Get(ctx, "panic")
	require.NoError(t, err)
	require.Contains(t, j.LastError, "kaboom")
}

// TestRunCancelsHandlerWhenLeaseLost: a job canceled while its handler
// runs is found lost by the next heartbeat, and the handler's ctx is
// canceled with the reason; Run leaves the job alone.
func TestRunCancelsHandlerWhenLeaseLost(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{LeaseDuration: 600 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	stop := make(chan struct{})
	var cause error
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: 50 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			require.NoError(t, r.Cancel(ctx, l.JobID))
			<-hctx.Done()
			cause = context.Cause(hctx)
			close(stop)
			return hctx.Err()
		})
	require.NoError(t, err)
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, cause, &lost)
	require.Equal(t, leaserouter.LostCanceled, lost.Reason)
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateCanceled, j.State)
}

// TestRunKeepsLongJobAlive: a job longer than its lease keeps the lease
// by Run's heartbeats, and is completed once.
func TestRunKeepsLongJobAlive(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 300 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	stop := make(chan struct{})
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: 50 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			first := l.Expiry()
			awaitDBTime(t, db, first.Add(200*time.Millisecond))
			require.NoError(t, hctx.Err(), "the lease outlived its first expiry")
			close(stop)
			return nil
		})
	require.NoError(t, err)
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	require.Equal(t, 1, j.Attempt)
}

// TestRunCompleteTx: a handler that completes its own lease in its
// transaction, with a fenced write, leaves Run nothing to do; one whose
// transaction rolls back is completed by Run as usual.
func TestRunCompleteTx(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	_, err := db.Exec(ctx, "CREATE TABLE results (id text PRIMARY KEY, v int)")
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "commit", 1))
	require.NoError(t, r.Enqueue(ctx, "rollback", 2))
	var n atomic.Int32
	stop := make(chan struct{})
	err = runUntil(t, r, leaserouter.WorkerOptions{Workers: 1}, stop, func(hctx context.Context, l *pgrouter.Lease[int]) error {
		tx, err := db.Begin(hctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := pgrouter.Fence(hctx, tx, "results/"+l.JobID, l.Token); err != nil {
			return err
		}
		if _, err := tx.Exec(hctx, "INSERT INTO results VALUES ($1, $2)", l.JobID, l.Payload); err != nil {
			return err
		}
		if err := l.CompleteTx(hctx, tx); err != nil {
			return err
		}
		if l.JobID == "commit" {
			err = tx.Commit(hctx)
		}
		if n.Add(1) == 2 {
			close(stop)
		}
		return err
	})
	require.NoError(t, err)
	for _, id := range []string{"commit", "rollback"} {
		j, _, err := r.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, leaserouter.StateSucceeded, j.State, id)
	}
	var rows int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM results").Scan(&rows))
	require.Equal(t, 1, rows, "only the committed write")
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, s.StaleRejections, "Run did not try to complete the committed job again")
}

// TestKeepAlive: KeepAlive keeps a lease past its duration, and cancels
// its ctx with the reason once the lease is lost.
func TestKeepAlive(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 300 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	kctx, cancel := pgrouter.KeepAlive(ctx, l, 50*time.Millisecond)
	defer cancel()
	awaitDBTime(t, db, l.Expiry().Add(300*time.Millisecond))
	require.NoError(t, kctx.Err())
	require.NoError(t, r.Cancel(ctx, "a"))
	select {
	case <-kctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("KeepAlive's ctx not canceled after the lease was lost")
	}
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, context.Cause(kctx), &lost)
	require.Equal(t, leaserouter.LostCanceled, lost.Reason)

	kctx, cancel = pgrouter.KeepAlive[int](ctx, nil, 0)
	defer cancel()
	require.Error(t, kctx.Err())
}

// TestRunBadInput: a nil handler and bad options are refused at once; a
// closed Router's Run returns ErrClosed.
func TestRunBadInput(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	h := func(context.Context, *pgrouter.Lease[int]) error { return nil }
	require.ErrorIs(t, r.Run(t.Context(), leaserouter.WorkerOptions{}, nil), leaserouter.ErrInvalidOptions)
	require.ErrorIs(t, r.Run(t.Context(), leaserouter.WorkerOptions{Workers: -1}, h), leaserouter.ErrInvalidOptions)
	require.ErrorIs(t, r.Run(t.Context(), leaserouter.WorkerOptions{HeartbeatInterval: time.Hour}, h), leaserouter.ErrInvalidOptions)
	require.ErrorIs(t, r.Run(t.Context(), leaserouter.WorkerOptions{Batch: -1}, h), leaserouter.ErrInvalidOptions)
	require.NoError(t, r.Close(t.Context()))
	require.ErrorIs(t, r.Run(t.Context(), leaserouter.WorkerOptions{}, h), leaserouter.ErrClosed)
}
