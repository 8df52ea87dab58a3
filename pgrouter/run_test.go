package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
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

// TestKeepAlive: KeepAlive keeps a lease past its duration, and cancels
// its ctx with the reason once the lease is lost.
func TestKeepAlive(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 300 * time.Millisecond})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
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

// TestRunFinishedJobsKeepTheirLeaseDuringALongBatch: jobs of a batch
// whose handlers returned nil are completed by the next heartbeat round
// while a later job of the batch runs longer than the lease: none
// expires, none runs again.
func TestRunFinishedJobsKeepTheirLeaseDuringALongBatch(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{LeaseDuration: 600 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	ctx := t.Context()
	const n = 20
	specs := make([]leaserouter.JobSpec[int], n)
	for i := range specs {
		specs[i] = leaserouter.JobSpec[int]{ID: fmt.Sprintf("j%02d", i), Payload: i}
	}
	_, err := r.EnqueueMany(ctx, specs)
	require.NoError(t, err)
	var mu sync.Mutex
	runs := map[int]int{}
	var attempts []string
	stop := make(chan struct{})
	var once sync.Once
	err = runUntil(t, r, leaserouter.WorkerOptions{Workers: 1, Batch: 16, HeartbeatInterval: 100 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			mu.Lock()
			runs[l.Payload]++
			if l.Attempt > 1 {
				attempts = append(attempts, fmt.Sprintf("%s attempt %d", l.JobID, l.Attempt))
			}
			all := len(runs) == n
			mu.Unlock()
			if l.Payload == 10 && l.Attempt == 1 {
				select { // a long job, kept alive by Run's heartbeats
				case <-time.After(1500 * time.Millisecond):
				case <-hctx.Done():
					return hctx.Err()
				}
			}
			if all {
				once.Do(func() { time.AfterFunc(time.Second, func() { close(stop) }) })
			}
			return nil
		})
	require.NoError(t, err)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	t.Logf("re-runs: %v; stats: expirations=%d stale=%d", attempts, s.Expirations, s.StaleRejections)
	for p, c := range runs {
		require.Equal(t, 1, c, "job %d ran %d times", p, c)
	}
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

// TestRunStartsNoJobAfterStop: once Run's ctx is done, workers start no
// more jobs of their batches (they check before each job).
func TestRunStartsNoJobAfterStop(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	bg := t.Context()
	var late atomic.Int64
	for round := 0; round < 30; round++ {
		specs := make([]leaserouter.JobSpec[int], 2000)
		for i := range specs {
			specs[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint("r", round, "-", i), Payload: i}
		}
		_, err := r.EnqueueMany(bg, specs)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(bg)
		var stoppedAt atomic.Int64
		var ran atomic.Int64
		done := make(chan error, 1)
		go func() {
			done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 4, Batch: 256}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
				if s := stoppedAt.Load(); s != 0 && time.Now().UnixNano() > s {
					late.Add(1)
				}
				if ran.Add(1) == 300 {
					stoppedAt.Store(time.Now().UnixNano())
					cancel()
				}
				return nil
			})
		}()
		require.NoError(t, <-done)
		cancel()
	}
	// A worker that checked just before the cancel may still start one job
	// (check, then act); before the fix it was hundreds.
	require.Less(t, late.Load(), int64(30), "handlers started after Run's ctx was canceled")
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

// TestRunDoesNotSpinOnLockedDueRow: idle workers poll a due row another
// transaction holds every lockedPoll, not in a loop.
func TestRunDoesNotSpinOnLockedDueRow(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "s", 1, leaserouter.WithDelay(200*time.Millisecond)))
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT 1 FROM leaserouter_jobs WHERE id = 's' FOR UPDATE")
	require.NoError(t, err)
	j, _, err := r.Get(ctx, "s")
	require.NoError(t, err)
	awaitDBTime(t, db, j.RunAt) // its run-at passed; settling skips it (locked)
	commits := func() int64 {
		var n int64
		require.NoError(t, db.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").Scan(&n))
		return n
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- r.Run(rctx, leaserouter.WorkerOptions{Workers: 2}, func(context.Context, *pgrouter.Lease[int]) error { return nil })
	}()
	time.Sleep(200 * time.Millisecond) // real time: the workers start and find the row due
	before := commits()
	time.Sleep(time.Second) // real time: a rate over one second
	after := commits()
	cancel()
	require.NoError(t, <-done)
	t.Logf("transactions in 1s with 2 idle workers: %d", after-before)
	require.Less(t, after-before, int64(100), "idle Run spinning on a locked due row")
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

// TestRunSpreadsABurstOverIdleWorkers: a burst leased by one worker
// whose batches grew is shared with the Run's idle workers (they steal
// half of its waiting jobs).
func TestRunSpreadsABurstOverIdleWorkers(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{LeaseDuration: 30 * time.Second})
	ctx := t.Context()
	var mu sync.Mutex
	per := map[string]int{}
	phase := atomic.Int32{}
	var ran atomic.Int32
	var running, most atomic.Int32 // burst handlers running at once, and the most seen
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- r.Run(rctx, leaserouter.WorkerOptions{Workers: 4, Batch: 64}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
			if phase.Load() == 1 {
				mu.Lock()
				per[l.WorkerID]++
				mu.Unlock()
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				running.Add(-1)
			}
			ran.Add(1)
			return nil
		})
	}()
	// warm-up: short jobs grow each worker's batch size
	for round := 0; round < 40; round++ {
		specs := make([]leaserouter.JobSpec[int], 64)
		for i := range specs {
			specs[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint("w", round, "-", i)}
		}
		_, err := r.EnqueueMany(ctx, specs)
		require.NoError(t, err)
		eventually(t, 10*time.Second, "warm-up", func() bool { return ran.Load() == int32(64*(round+1)) })
	}
	phase.Store(1)
	specs := make([]leaserouter.JobSpec[int], 64)
	for i := range specs {
		specs[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint("b", i)}
	}
	start := time.Now()
	_, err := r.EnqueueMany(ctx, specs)
	require.NoError(t, err)
	eventually(t, 20*time.Second, "burst", func() bool { return ran.Load() == int32(64*41) })
	took := time.Since(start)
	cancel()
	require.NoError(t, <-done)
	t.Logf("burst of 64 x 20ms on 4 workers took %v (ideal ~320ms); leased per worker: %v; at most %d at once", took, per, most.Load())
	require.Len(t, per, 1, "one worker leased the whole burst (the premise)")
	require.GreaterOrEqual(t, most.Load(), int32(2), "the burst one worker leased ran on several workers at once")
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
	require.Error(t, first.Err(), "superseded")
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
