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
)

// runUntil runs r.Run with opts and h until stop is closed (or 20s pass,
// failing t), and returns Run's error once the Router's background work
// (what the Run's wind-down left to it) is done.
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
	err := <-done
	// Run returns within 100ms of its ctx's end: what its last round trips
	// did not do by then (on a busy machine, say), the Router finishes in
	// the background.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	require.NoError(t, pgrouter.AwaitBackground(wctx, r), "the Run's wind-down finished in the background")
	return err
}

// TestRunProcessesEveryJobOnce: Run's workers lease in batches and
// complete every job once.
func TestRunProcessesEveryJobOnce(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	const n = 300
	enqueueJobs(t, r, "j", n)
	var mu sync.Mutex
	seen := map[int]int{}
	stop := make(chan struct{})
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 2, Batch: 32}, stop, func(_ context.Context, l *pgrouter.Lease[int]) error {
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

// TestRunCtxDoneCancelsHandlers: when Run's ctx is done, a running
// handler's ctx is canceled (as in the core), so a handler waiting on it
// returns and Run with it.
func TestRunCtxDoneCancelsHandlers(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{LeaseDuration: time.Second})
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
			close(started)
			<-hctx.Done()
			return hctx.Err()
		})
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		// unblock: Close with a done ctx revokes, the next beat cancels
		cctx, c := context.WithCancel(context.Background())
		c()
		_ = r.Close(cctx)
		<-done
		t.Fatal("Run did not return within 3s of its ctx being canceled: the handler's ctx was never canceled")
	}
}

// TestRunHeartbeatsNotStalledByCompleteTx: a handler holding its row
// lock (CompleteTx in a transaction still open) does not stall the Run's
// heartbeat for the other leases (the heartbeat skips locked rows).
func TestRunHeartbeatsNotStalledByCompleteTx(t *testing.T) {
	r, db := newRouter[string](t, pgrouter.Options{LeaseDuration: time.Second})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "tx", "tx"))
	require.NoError(t, r.Enqueue(ctx, "long", "long"))
	var longCause error
	stop := make(chan struct{})
	var n atomic.Int32
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 2, HeartbeatInterval: 200 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[string]) error {
			defer func() {
				if n.Add(1) == 2 {
					close(stop)
				}
			}()
			if l.Payload == "tx" {
				tx, err := db.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx)
				if err := l.CompleteTx(ctx, tx); err != nil {
					return err
				}
				time.Sleep(2 * time.Second) // writing the result, in the same tx
				return tx.Commit(ctx)
			}
			select {
			case <-time.After(2500 * time.Millisecond):
			case <-hctx.Done():
				longCause = context.Cause(hctx)
				return hctx.Err()
			}
			return nil
		})
	require.NoError(t, err)
	require.NoError(t, longCause, "the long job's ctx was canceled while the database was up")
}

// TestRunLostLeaseOfJobLeasedAgainInTheSameRun: a lease of the Run lost
// in the database (its expiry moved to now, as a step of the database's
// clock would) and the job leased again by another worker of the same
// Run: heartbeats match leases by job and token, so the lost one's
// handler is canceled.
func TestRunLostLeaseOfJobLeasedAgainInTheSameRun(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 2 * time.Second, PollInterval: 20 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	var firstCause atomic.Value
	stop := make(chan struct{})
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 2, HeartbeatInterval: 500 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			if l.Attempt == 1 {
				_, err := db.Exec(ctx, "UPDATE leaserouter_jobs SET lease_expires_at = clock_timestamp() WHERE id = 'a'")
				require.NoError(t, err)
				select {
				case <-hctx.Done():
					firstCause.Store(fmt.Sprint(context.Cause(hctx)))
				case <-time.After(5 * time.Second):
					firstCause.Store("never canceled")
				}
				close(stop)
				return nil
			}
			// the second attempt: held until the first is seen canceled
			select {
			case <-stop:
			case <-time.After(10 * time.Second):
			}
			return nil
		})
	require.NoError(t, err)
	require.NotEqual(t, "never canceled", firstCause.Load(), "the lost lease's handler ctx")
}

// TestRunHeartbeatsNotStarvedByPool: with Workers >= the pool's MaxConns
// and handlers holding a connection while they work, heartbeats go on
// (on the Run's own connection): no handler is canceled as unproven.
func TestRunHeartbeatsNotStarvedByPool(t *testing.T) {
	_, db0 := newRouter[int](t, pgrouter.Options{})
	cfg := db0.Config().Copy()
	cfg.MaxConns = 2
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: time.Second})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	require.NoError(t, r.Enqueue(ctx, "b", 2))
	var canceled atomic.Int32
	var n atomic.Int32
	stop := make(chan struct{})
	err = runUntil(t, r, leaserouter.WorkerOptions{Workers: 2, HeartbeatInterval: 200 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			defer func() {
				if n.Add(1) == 2 {
					close(stop)
				}
			}()
			tx, err := db.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			select {
			case <-time.After(2 * time.Second):
			case <-hctx.Done():
				canceled.Add(1)
				return hctx.Err()
			}
			if err := l.CompleteTx(ctx, tx); err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
	require.NoError(t, err)
	require.Zero(t, canceled.Load(), "handlers canceled as unproven with the database up")
}

// TestRunHandlerEndsItsOwnLease: a handler that completes, fails or
// releases its lease itself leaves Run nothing to do: no second attempt
// at ending it, no stale rejection.
func TestRunHandlerEndsItsOwnLease(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{Backoff: func(int) time.Duration { return time.Hour }})
	ctx := t.Context()
	enqueueJobs(t, r, "j", 3)
	var n atomic.Int64
	stop := make(chan struct{})
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 1, Batch: 1}, stop, func(hctx context.Context, l *pgrouter.Lease[int]) error {
		var err error
		switch l.Payload {
		case 0:
			err = l.Complete(hctx)
		case 1:
			err = l.Fail(hctx, errors.New("by the handler"))
		case 2:
			err = l.Release(hctx)
		}
		if n.Add(1) == 3 {
			close(stop)
		}
		return err
	})
	require.NoError(t, err)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, s.StaleRejections, "Run did not end the leases again")
	require.Equal(t, 1, s.Succeeded)
	require.Equal(t, 1, s.Scheduled, "failed by the handler: retried after its backoff")
}

// nilErr's Error dereferences its receiver: a typed nil *nilErr returned
// as an error panics when its message is read.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// TestNoUserCodeUnrecoveredFailWithPanickingError: as in the core, a cause
// whose Error() panics — a typed nil from Fail's caller or a Run handler —
// fails the attempt with a LastError saying so; neither the caller nor the
// process dies. A message with NUL or invalid UTF-8 is stored, repaired,
// instead of failing on the text column.
func TestNoUserCodeUnrecoveredFailWithPanickingError(t *testing.T) {
	dead := make(chan struct{})
	r, _ := newRouter[string](t, pgrouter.Options{MaxAttempts: 1, OnEvent: func(e leaserouter.Event) {
		if e.JobID == "run" && e.Kind == leaserouter.EventDead {
			close(dead) // Run is stopped only then: a handler's error once it stops releases the job instead
		}
	}})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "direct", "direct"))
	require.NoError(t, r.Enqueue(ctx, "bytes", "bytes"))
	require.NoError(t, r.Enqueue(ctx, "run", "run"))
	var typedNil *nilErr
	for range 2 {
		l, err := r.TryAcquire(ctx, "w")
		require.NoError(t, err)
		var cause error = typedNil
		if l.JobID == "bytes" {
			cause = errors.New("a\x00b\xffc")
		}
		require.NotPanics(t, func() { require.NoError(t, l.Fail(ctx, cause)) })
	}
	require.NoError(t, runUntil(t, r, leaserouter.WorkerOptions{Workers: 1}, dead, func(_ context.Context, l *pgrouter.Lease[string]) error {
		var e *nilErr
		return e
	}))
	for id, want := range map[string]string{
		"direct": "Error() of *pgrouter_test.nilErr panicked",
		"run":    "Error() of *pgrouter_test.nilErr panicked",
		"bytes":  "a\uFFFDb\uFFFDc",
	} {
		j, ok, err := r.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, leaserouter.StateFailed, j.State, id)
		require.Contains(t, j.LastError, want, id)
	}
}
