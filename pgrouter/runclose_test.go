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
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestRunFinishedLeaseNeverExpiresWaitingForPool: a Run worker's finished
// leases are completed by the heartbeat rounds while its next claim waits
// for a pool connection (here: the pool's one connection held by another
// handler's transaction, open after CompleteTx, for 2.5 LeaseDurations).
// Before the fix the claim took them along while it waited: neither
// heartbeated nor completed, they expired and the succeeded job ran again.
func TestRunFinishedLeaseNeverExpiresWaitingForPool(t *testing.T) {
	db := poolOf(t, 1)
	const lease = time.Second
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: lease})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "long", 1, leaserouter.WithPriority(10)))
	require.NoError(t, r.Enqueue(ctx, "short", 2))
	txOpen := make(chan struct{})
	var mu sync.Mutex
	calls := map[string]int{}
	stop := make(chan struct{})
	var once sync.Once
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 2, HeartbeatInterval: lease / 5}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			mu.Lock()
			calls[l.JobID]++
			n := calls[l.JobID]
			mu.Unlock()
			if l.JobID == "short" {
				if n == 1 {
					<-txOpen
				}
				if n > 1 {
					once.Do(func() { close(stop) })
				}
				return nil
			}
			tx, err := db.Begin(hctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.Background())
			close(txOpen)
			if err := l.CompleteTx(hctx, tx); err != nil {
				return err
			}
			time.Sleep(5 * lease / 2) // work in the transaction after CompleteTx, the pool's one connection held
			if err := tx.Commit(hctx); err != nil {
				return err
			}
			go func() { time.Sleep(2 * lease); once.Do(func() { close(stop) }) }() // time for a rerun of "short" to show
			return nil
		})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	j, _, err := r.Get(ctx, "short")
	require.NoError(t, err)
	t.Logf("handler calls %v; short: %v attempt %d last error %q", calls, j.State, j.Attempt, j.LastError)
	require.Equal(t, 1, calls["short"], "a job whose handler succeeded runs again")
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	require.Equal(t, 1, j.Attempt)
}

// TestRunCompletesAfterCloseRevocationFailed: when Close's revocation
// does not get through (the server stalled past Close's ctx), the leases
// stay valid until their expiry and their holders' operations are
// accepted (Close's doc): a Run handler returning nil meanwhile has its
// job completed. Before the fix the revocation forgot the leases before
// its statement ran, and Run took that for "ended by the handler" and
// dropped the completion (the job dead with MaxAttempts 1).
func TestRunCompletesAfterCloseRevocationFailed(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, socketOf(base))
	db := poolVia(t, base, p.ln, 0)
	const lease = 3 * time.Second
	r, err := pgrouter.New[int](t.Context(), db, pgrouter.Options{LeaseDuration: lease, MaxAttempts: 1})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- r.Run(t.Context(), leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: lease / 3}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
			calls.Add(1)
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	p.stall()
	cctx, ccancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer ccancel()
	require.ErrorIs(t, r.Close(cctx), context.DeadlineExceeded)
	p.resume()
	st, _ := jobState(t, base, "a")
	require.Equal(t, leaserouter.StateLeased, st, "the revocation did not get through")
	close(release) // the handler succeeds while its lease is still valid
	t0 := time.Now()
	require.NoError(t, <-done)
	t.Logf("Run returned after %v", time.Since(t0))
	st, attempt := jobState(t, base, "a")
	require.Equal(t, leaserouter.StateSucceeded, st, "a handler that succeeded while its lease was valid: the job is completed")
	require.Equal(t, 1, attempt)
	require.EqualValues(t, 1, calls.Load())
}

// TestCloseReturnsWithin100msOfCtxWithBackgroundWork: Close returns
// within 100ms of its ctx's end with the server stalled, a lease to
// revoke and a background task (a stopped Run's Fail that could not get
// through) in flight. Before the fix the revocation's grace and the
// task's own graces added up (~170ms).
func TestCloseReturnsWithin100msOfCtxWithBackgroundWork(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, socketOf(base))
	db := poolVia(t, base, p.ln, 0)
	r, err := pgrouter.New[int](t.Context(), db, pgrouter.Options{LeaseDuration: ctxLease})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
			close(started)
			<-release
			return errors.New("boom")
		})
	}()
	<-started
	p.stall()
	close(release)
	cancel()
	require.NoError(t, <-done) // its release of "a" left to the background: the server is stalled
	cctx, ccancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer ccancel()
	err = r.Close(cctx)
	late := time.Since(deadlineOf(cctx))
	t.Logf("Close returned %v after its ctx ended: %v", late, err)
	p.resume()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, late, 100*time.Millisecond, "Close returns within 100ms of its ctx's end")
}

// TestCloseNeverRevokesRunLeasesNotRunning: Close with a ctx done
// already revokes the running leases at once, but not a Run's leases that
// are not running: one leased ahead of its turn is handed back (its
// attempt not counted), a finished one completed, by the stopping Run.
// Before the fix the revocation raced the Run's own hand-back and
// completion, and mostly won (the finished job revoked, to run again; a
// job never started counting an attempt): several rounds, to be sure.
func TestCloseNeverRevokesRunLeasesNotRunning(t *testing.T) {
	db := pgtest.New(t)
	for round := range 6 {
		r, err := pgrouter.New[int](t.Context(), db, pgrouter.Options{Queue: fmt.Sprintf("q%d", round), LeaseDuration: 10 * time.Second})
		require.NoError(t, err)
		ctx := t.Context()
		for i, id := range []string{"0", "1", "2", "a", "b", "c", "d"} {
			require.NoError(t, r.Enqueue(ctx, id, i, leaserouter.WithPriority(10-i)))
		}
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() { // batches [0], [1 2], [a b c d]: a finishes, b runs, c and d wait
			done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, Batch: 4, HeartbeatInterval: 5 * time.Second},
				func(hctx context.Context, l *pgrouter.Lease[int]) error {
					if l.JobID == "b" {
						close(started)
						<-release
					}
					return nil
				})
		}()
		<-started
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, r.Close(cctx), context.Canceled) // b revoked at once
		state := func(id string) (leaserouter.State, int, string) {
			var st string
			var attempt int
			var ended string
			require.NoError(t, db.QueryRow(ctx, "SELECT state::text, attempt, ended FROM leaserouter_jobs WHERE queue = $1 AND id = $2",
				fmt.Sprintf("q%d", round), id).Scan(&st, &attempt, &ended))
			return stateNamed(t, st), attempt, ended
		}
		// While b still runs, the stopping Run completes a and hands back c
		// and d (on its heartbeat connection); the revocation must not have
		// ended them first.
		eventually(t, 10*time.Second, "a completed, c and d handed back", func() bool {
			a, _, _ := state("a")
			c, _, _ := state("c")
			d, _, _ := state("d")
			return a != leaserouter.StateLeased && c != leaserouter.StateLeased && d != leaserouter.StateLeased
		})
		st, attempt, ended := state("a")
		require.Equal(t, leaserouter.StateSucceeded, st, "round %d: a finished lease is completed, not revoked (%d, %s)", round, attempt, ended)
		for _, id := range []string{"c", "d"} {
			st, attempt, ended = state(id)
			require.Equal(t, leaserouter.StatePending, st, "round %d: %s", round, id)
			require.Equal(t, 0, attempt, "round %d: %s never started: no attempt counted (ended %s)", round, id, ended)
		}
		close(release)
		require.NoError(t, <-done)
		st, attempt, ended = state("b") // revoked, or completed if the revocation did not get through in time
		t.Logf("round %d: the running lease: %v attempt %d ended %q", round, st, attempt, ended)
	}
}
