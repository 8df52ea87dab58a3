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
		require.Equal(t, leaserouter.StateDead, j.State, id)
		require.Contains(t, j.LastError, want, id)
	}
}

// TestRunReturnsPromptlyAfterCtxWithServerStalled: Run whose ctx is
// canceled while the server stalls returns within 1s of the cancel once
// its handler (which honours its ctx) has returned; the release it could
// not make is made in the background once the server answers again.
func TestRunReturnsPromptlyAfterCtxWithServerStalled(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, serverOf(base))
	db := poolVia(t, base, p.ln, 0)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: ctxLease})
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{})
	var returned atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 2}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
			close(started)
			<-hctx.Done()
			returned.Store(time.Now().UnixNano())
			return hctx.Err()
		})
	}()
	<-started
	p.stall()
	canceled := time.Now()
	cancel()
	err := <-done
	late := time.Since(canceled)
	t.Logf("Run returned %v after its ctx was canceled (server stalled; handler returned after %v): %v",
		late, time.Duration(returned.Load()-canceled.UnixNano()), err)
	require.NoError(t, err)
	require.Less(t, late, time.Second, "Run returns when its ctx ends and its handlers have returned")
	p.resume()
	eventually(t, 10*time.Second, "the job released in the background", func() bool {
		st, attempt := jobState(t, base, "a")
		return st == leaserouter.StatePending && attempt == 1
	})
}

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
	p := newStallProxy(t, serverOf(base))
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

// TestRunSurvivesServerRestart: the server stops (a fast shutdown, then a
// crash) while Run works and starts again; Run goes on by itself and
// every job ends succeeded, none lost.
func TestRunSurvivesServerRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprint("crash=", crash), func(t *testing.T) {
			c := pgtest.NewCluster(t)
			db := c.Pool(t)
			r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 2 * time.Second, PollInterval: 200 * time.Millisecond})
			ctx := t.Context()
			const n = 300
			enqueueJobs(t, r, "j", n)

			var ran atomic.Int64
			restarted := make(chan struct{})
			var once sync.Once
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- r.Run(rctx, leaserouter.WorkerOptions{Workers: 2, HeartbeatInterval: 300 * time.Millisecond},
					func(hctx context.Context, l *pgrouter.Lease[int]) error {
						if ran.Add(1) == n/3 {
							once.Do(func() {
								go func() {
									require.NoError(t, c.Stop(crash))
									require.NoError(t, c.Start(context.Background()))
									close(restarted)
								}()
							})
						}
						if ran.Load() >= n/3 {
							// Jobs in flight across the restart: their
							// leases cannot be proven while the server is
							// down, so their contexts end (or the restart
							// comes first).
							select {
							case <-restarted:
							case <-hctx.Done():
							}
						}
						return hctx.Err()
					})
			}()
			select {
			case <-restarted:
			case <-time.After(60 * time.Second):
				t.Fatal("no restart")
			}
			eventually(t, 60*time.Second, "every job succeeded after the restart", func() bool {
				var left int
				err := db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE state <> 'succeeded'").Scan(&left)
				return err == nil && left == 0
			})
			cancel()
			require.NoError(t, <-done)
			var succeeded int
			require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE state = 'succeeded'").Scan(&succeeded))
			require.Equal(t, n, succeeded, "none lost")
			require.Greater(t, ran.Load(), int64(n/3), "jobs ran after the restart")
		})
	}
}

// TestRunCancelsHandlerWhenLeaseUnproven: the database goes away while a
// handler runs; once LeaseDuration has passed since the last accepted
// heartbeat was sent, the handler's ctx is canceled (its lease can no
// longer be proven valid), and after the server is back the job runs
// again and completes.
func TestRunCancelsHandlerWhenLeaseUnproven(t *testing.T) {
	c := pgtest.NewCluster(t)
	db := c.Pool(t)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 500 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	causes := make(chan error, 2)
	server := make(chan error, 4) // the handler's server stop and start, checked in the test's goroutine
	stop := make(chan struct{})
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: 100 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			if l.Attempt > 1 {
				close(stop)
				return nil
			}
			server <- c.Stop(false)
			select { // LeaseDuration (500ms) from the last accepted heartbeat at most
			case <-hctx.Done():
			case <-time.After(10 * time.Second):
			}
			causes <- context.Cause(hctx)
			server <- c.Start(context.Background())
			return hctx.Err()
		})
	require.NoError(t, err)
	require.NoError(t, <-server, "stop the server")
	require.NoError(t, <-server, "start it again")
	cause := <-causes
	require.ErrorIs(t, cause, leaserouter.ErrLeaseLost, "canceled as unproven")
	var lost *leaserouter.LeaseLostError
	require.False(t, errors.As(cause, &lost), "not a refusal the database gave: it could not be asked")
	eventually(t, 10*time.Second, "the job succeeded on a later attempt", func() bool {
		j, _, err := r.Get(ctx, "a")
		return err == nil && j.State == leaserouter.StateSucceeded && j.Attempt >= 2
	})
}

// TestRunHeartbeatConnectionReplacedAfterRestart: the heartbeat
// goroutine's own connection dies with a server restart and is made again
// even while no handler runs, so a finished job left to the heartbeat is
// completed: it never runs twice. The lease (8s) outlasts a restart on a
// busy machine by far, so the test depends on what the Router does, not on
// how fast the server comes back: without a new connection the finished
// job would wait for its expiry and run again (attempt 2).
func TestRunHeartbeatConnectionReplacedAfterRestart(t *testing.T) {
	c := pgtest.NewCluster(t)
	db := c.Pool(t)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 8 * time.Second, PollInterval: 100 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	var runs atomic.Int64
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	restarted := make(chan struct{})
	go func() {
		done <- r.Run(rctx, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: 100 * time.Millisecond},
			func(hctx context.Context, l *pgrouter.Lease[int]) error {
				if runs.Add(1) == 1 {
					time.Sleep(300 * time.Millisecond) // a few heartbeat rounds on the Run's own connection
					require.NoError(t, c.Stop(false))
					go func() {
						defer close(restarted)
						time.Sleep(700 * time.Millisecond)
						require.NoError(t, c.Start(context.Background()))
					}()
				}
				return nil
			})
	}()
	<-restarted
	eventually(t, 30*time.Second, "the finished job completed after the restart", func() bool {
		j, _, err := r.Get(ctx, "a")
		return err == nil && j.State == leaserouter.StateSucceeded
	})
	cancel()
	require.NoError(t, <-done)
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	t.Logf("job a: %v, attempt %d; handler ran %d times", j.State, j.Attempt, runs.Load())
	require.Equal(t, 1, j.Attempt, "completed on its first lease")
	require.EqualValues(t, 1, runs.Load(), "the job finished once, before its lease's end")
}
