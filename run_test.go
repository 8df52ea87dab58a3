package leaserouter_test

// Tests of Run's machinery behind its contract: the handler context made
// only when used, the one heartbeat goroutine serving every worker, and the
// worker that completes a job and takes the next under one lock. Batches
// are tested in worker_test.go.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestRunHandlerContextUntouchedUntilLost: a handler that only polls Err
// (so the context behind it is never made) sees the loss at once, and
// context.Cause, asked afterwards, still wraps ErrLeaseLost.
func TestRunHandlerContextUntouchedUntilLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		type seen struct{ err, cause error }
		out := make(chan seen, 1)
		h := func(ctx context.Context, l *lease) error {
			for ctx.Err() == nil {
				time.Sleep(time.Second)
			}
			out <- seen{ctx.Err(), context.Cause(ctx)}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		sleep(2 * ld)
		requireBlocked(t, out)
		require.NoError(t, r.Cancel("a"))
		sleep(time.Second)
		s := receive(t, out)
		require.ErrorIs(t, s.err, context.Canceled)
		require.ErrorIs(t, s.cause, leaserouter.ErrLeaseLost)
		require.Equal(t, leaserouter.StateCanceled, get(t, r, "a").State, "the handler's nil completes nothing")
		require.Zero(t, r.Stats().StaleRejections, "Run knew the lease was lost and did not act on it")
		stopRun(t, cancel, done)
	})
}

// TestRunHandlerContextDerived: contexts derived from the handler's, and
// AfterFunc on it, see the loss of the lease.
func TestRunHandlerContextDerived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		after := make(chan struct{})
		causes := make(chan error, 1)
		h := func(ctx context.Context, l *lease) error {
			context.AfterFunc(ctx, func() { close(after) })
			child, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			<-child.Done()
			causes <- context.Cause(child)
			return child.Err()
		}
		done := goRun(context.Background(), r, leaserouter.WorkerOptions{Workers: 1}, h)
		sleep(ld)
		require.NoError(t, r.Cancel("a"))
		synctest.Wait()
		require.ErrorIs(t, receive(t, causes), leaserouter.ErrLeaseLost)
		receive(t, after)
		require.NoError(t, r.Close(context.Background()))
		synctest.Wait()
		require.NoError(t, receive(t, done))
	})
}

// TestRunHandlerContextAfterReturn: a context kept past the handler's
// return is canceled with context.Canceled, whether or not it was made
// before.
func TestRunHandlerContextAfterReturn(t *testing.T) {
	for _, touch := range []bool{false, true} {
		t.Run(fmt.Sprint("touched=", touch), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				require.NoError(t, r.Enqueue("a", ""))
				kept := make(chan context.Context, 1)
				h := func(ctx context.Context, l *lease) error {
					if touch {
						_ = ctx.Done() // makes the context behind it
					}
					kept <- ctx
					return nil
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
				synctest.Wait()
				c := receive(t, kept)
				require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
				require.ErrorIs(t, c.Err(), context.Canceled)
				require.ErrorIs(t, context.Cause(c), context.Canceled)
				receive(t, c.Done())
				_, hasDeadline := c.Deadline()
				require.False(t, hasDeadline)
				require.Contains(t, fmt.Sprint(c), "leaserouter")
				stopRun(t, cancel, done)
			})
		})
	}
}

// TestRunKeptLeasesAndContextsStayTheirOwn: handlers that keep their
// Lease and context past their return each keep their own job's: the
// Lease's fields as granted and its operations refused, the context
// canceled with context.Canceled, after later jobs ran through the same
// worker and block of leases, after one kept context is made, and after
// Run's ctx is canceled with a cause of its own (the handlers returned
// while it was live, so their contexts' cause stays context.Canceled).
func TestRunKeptLeasesAndContextsStayTheirOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		const n = 8
		for i := range n {
			require.NoError(t, r.Enqueue(fmt.Sprint("j", i), fmt.Sprint("p", i)))
		}
		type kept struct {
			ctx         context.Context
			l           *lease
			id, payload string
			token       leaserouter.Token
			attempt     int
			worker      string
			expiry      time.Time
			progressNil bool
		}
		var mu sync.Mutex
		var all []kept
		h := func(ctx context.Context, l *lease) error {
			mu.Lock()
			defer mu.Unlock()
			all = append(all, kept{ctx, l, l.JobID, l.Payload, l.Token, l.Attempt, l.WorkerID, l.Expiry(), l.Progress == nil})
			return nil
		}
		stop := errors.New("Run stopped")
		ctx, cancel := context.WithCancelCause(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		synctest.Wait()
		require.Len(t, all, n)
		for i, k := range all {
			require.Equal(t, fmt.Sprint("j", i), k.id, "one worker runs the jobs in order")
		}
		// Until the last check, only Err is asked (which makes no
		// context) of all but the one made on purpose.
		check := func(when string, all []kept, made bool) {
			for _, k := range all {
				require.Equal(t, k.id, k.l.JobID, when)
				require.Equal(t, k.payload, k.l.Payload, when)
				require.Equal(t, k.token, k.l.Token, when)
				require.Equal(t, k.attempt, k.l.Attempt, when)
				require.Equal(t, k.worker, k.l.WorkerID, when)
				require.Equal(t, k.progressNil, k.l.Progress == nil, when)
				require.True(t, k.expiry.Equal(k.l.Expiry()), when)
				require.ErrorIs(t, k.l.Complete(), leaserouter.ErrLeaseLost, when)
				require.ErrorIs(t, k.ctx.Err(), context.Canceled, when)
				if made {
					require.ErrorIs(t, context.Cause(k.ctx), context.Canceled, when)
					receive(t, k.ctx.Done())
				}
			}
		}
		check("after every job ran", all, false)
		_ = all[0].ctx.Done() // makes the first kept context
		check("after one kept context was made", all[:1], true)
		check("after one kept context was made", all[1:], false)
		cancel(stop)
		synctest.Wait()
		require.NoError(t, receive(t, done))
		check("after Run's ctx was canceled", all, true)
		for i := range n {
			require.Equal(t, leaserouter.StateSucceeded, get(t, r, fmt.Sprint("j", i)).State)
		}
	})
}

// TestRunHandlerContextValuesAndDeadline: the handler's context carries
// the values and deadline of Run's.
func TestRunHandlerContextValuesAndDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		parent, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), time.Now().Add(time.Hour))
		defer cancel()
		want, _ := parent.Deadline()
		type seen struct {
			v        any
			deadline time.Time
		}
		out := make(chan seen, 1)
		h := func(ctx context.Context, l *lease) error {
			d, _ := ctx.Deadline()
			out <- seen{ctx.Value(key{}), d}
			return nil
		}
		done := goRun(parent, r, leaserouter.WorkerOptions{Workers: 1}, h)
		synctest.Wait()
		s := receive(t, out)
		require.Equal(t, "v", s.v)
		require.True(t, want.Equal(s.deadline))
		stopRun(t, cancel, done)
	})
}

// TestRunHandlerContextRunCanceledUntouched: Run's ctx canceled reaches a
// handler that only polls Err.
func TestRunHandlerContextRunCanceledUntouched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		errs := make(chan error, 1)
		h := func(ctx context.Context, l *lease) error {
			for ctx.Err() == nil {
				time.Sleep(time.Second)
			}
			errs <- ctx.Err()
			return ctx.Err()
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		sleep(5 * time.Second)
		cancel()
		sleep(time.Second)
		require.ErrorIs(t, receive(t, errs), context.Canceled)
		require.NoError(t, receive(t, done))
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State, "an error after Run's ctx is done releases the job")
		require.Zero(t, r.Stats().Retries)
	})
}

// TestRunHandlerContextCauseOrder: the handler's context reports the
// first of its two causes, whichever came first and whenever the handler
// asks, as context.WithCancelCause(Run's ctx) canceled at the loss would.
func TestRunHandlerContextCauseOrder(t *testing.T) {
	type seen struct{ err, cause error }
	run := func(t *testing.T, runCtx context.Context, stopRun func(), lossFirst bool) seen {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		out := make(chan seen, 1)
		proceed := make(chan struct{})
		h := func(ctx context.Context, l *lease) error {
			<-proceed // no look at ctx until both causes have come
			before := ctx.Err()
			<-ctx.Done() // makes the context behind it
			require.Equal(t, before, ctx.Err(), "Err is the same before and after the context is made")
			out <- seen{ctx.Err(), context.Cause(ctx)}
			return nil
		}
		done := goRun(runCtx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		sleep(time.Second)
		if lossFirst {
			require.NoError(t, r.Cancel("a"))
			sleep(time.Second)
			stopRun()
		} else {
			stopRun()
			sleep(time.Second)
			require.NoError(t, r.Cancel("a"))
		}
		sleep(time.Second)
		close(proceed)
		synctest.Wait()
		require.NoError(t, receive(t, done))
		return receive(t, out)
	}
	t.Run("loss then Run canceled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			s := run(t, ctx, cancel, true)
			require.ErrorIs(t, s.err, context.Canceled)
			require.ErrorIs(t, s.cause, leaserouter.ErrLeaseLost)
		})
	})
	t.Run("Run's deadline then loss", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s := run(t, ctx, func() { time.Sleep(time.Second) }, false)
			require.ErrorIs(t, s.err, context.DeadlineExceeded)
			require.ErrorIs(t, s.cause, context.DeadlineExceeded)
		})
	})
}

// TestRunCompletesAndTakesNext: a worker that completes a job takes the
// next one at the same instant, events in order, tokens increasing.
func TestRunCompletesAndTakesNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		for i := range 3 {
			require.NoError(t, r.Enqueue(fmt.Sprint("j", i), ""))
		}
		h := func(ctx context.Context, l *lease) error {
			time.Sleep(time.Second)
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1, WorkerID: "w"}, h)
		sleep(time.Minute)
		var kinds []string
		var last leaserouter.Token
		for _, e := range rec.all() {
			if e.Kind == leaserouter.EventEnqueued {
				continue
			}
			kinds = append(kinds, e.Kind.String()+" "+e.JobID)
			if e.Kind == leaserouter.EventLeaseAcquired {
				require.Greater(t, e.Token, last)
				last = e.Token
			}
		}
		require.Equal(t, []string{
			"lease_acquired j0", "completed j0", "lease_acquired j1",
			"completed j1", "lease_acquired j2", "completed j2",
		}, kinds)
		require.Equal(t, 3, r.Stats().Succeeded)
		stopRun(t, cancel, done)
	})
}

// TestRunTokensExhausted: when the Router can grant no more leases, Run
// returns an error wrapping ErrTokensExhausted once its handlers are done,
// with the jobs left pending. (Before, it returned nil.)
func TestRunTokensExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{TokenFloor: math.MaxInt64 - 5})
		for i := range 20 {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
		}
		var ran atomic.Int64
		err := r.Run(context.Background(), leaserouter.WorkerOptions{Workers: 2}, func(context.Context, *lease) error {
			ran.Add(1)
			return nil
		})
		require.ErrorIs(t, err, leaserouter.ErrTokensExhausted)
		require.EqualValues(t, 5, ran.Load(), "the five tokens above the floor")
		st := r.Stats()
		require.Equal(t, 5, st.Succeeded)
		require.Equal(t, 15, st.Pending, "no job lost")
	})
}

// TestRunTokensExhaustedWakesIdleWorkers: workers blocked waiting for a
// job learn that tokens ran out when one becomes ready, and Run returns.
// (Before, the woken worker returned without passing the wake-up on, and
// Run waited for ever.)
func TestRunTokensExhaustedWakesIdleWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{TokenFloor: math.MaxInt64 - 1})
		done := goRun(context.Background(), r, leaserouter.WorkerOptions{Workers: 3}, func(context.Context, *lease) error { return nil })
		synctest.Wait()
		require.NoError(t, r.Enqueue("a", "")) // takes the last token
		synctest.Wait()
		require.NoError(t, r.Enqueue("b", "")) // no worker can lease it
		synctest.Wait()
		require.ErrorIs(t, receive(t, done), leaserouter.ErrTokensExhausted)
		require.Equal(t, leaserouter.StatePending, get(t, r, "b").State)
	})
}

// TestRunRespectsEventBacklog: Run taking its next batch as it completes
// the last one waits for room like Acquire, and leases no more than the
// room left, so a slow hook bounds the backlog.
func TestRunRespectsEventBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var block atomic.Bool
		release := make(chan struct{})
		r := setup(t, leaserouter.Options{Retention: -1, OnEvent: func(leaserouter.Event) {
			if block.Load() {
				<-release
			}
		}})
		for i := range 20000 {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
		}
		synctest.Wait()
		block.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, func(context.Context, *lease) error { return nil })
		synctest.Wait()
		n := leaserouter.Backlog(r)
		close(release)
		stopRun(t, cancel, done)
		// Beyond the bound, only leases already granted add events: the
		// last batch's completions (completed and purged each).
		require.LessOrEqual(t, n, leaserouter.EventBacklog+2*leaserouter.DefaultBatch+4, "backlog while the hook was stuck")
	})
}

func TestRunHandlerContextCanceledWhenJobCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		causes := make(chan error, 1)
		h := func(ctx context.Context, l *lease) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		sleep(3 * ld) // background heartbeats keep it leased
		require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State)
		requireBlocked(t, causes)

		require.NoError(t, r.Cancel("a"))
		synctest.Wait() // no time passes: canceled as soon as the lease is lost
		cause := receive(t, causes)
		require.ErrorIs(t, cause, leaserouter.ErrLeaseLost)
		require.Equal(t, leaserouter.StateCanceled, get(t, r, "a").State, "the handler's error changes nothing")
		stopRun(t, cancel, done)
	})
}

func TestRunHandlerContextCanceledWhenLeaseRevoked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		causes := make(chan error, 1)
		h := func(ctx context.Context, l *lease) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		}
		runDone := goRun(context.Background(), r, leaserouter.WorkerOptions{Workers: 1}, h)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 3*ld) // longer than a lease: heartbeats go on
		defer cancel()
		closed := goClose(ctx, r)

		sleep(3*ld - time.Nanosecond)
		requireBlocked(t, causes)
		requireBlocked(t, closed)
		require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State)
		sleep(time.Nanosecond)
		require.ErrorIs(t, receive(t, causes), leaserouter.ErrLeaseLost)
		require.ErrorIs(t, receive(t, closed), context.DeadlineExceeded)
		require.NoError(t, receive(t, runDone), "Run stopped by Close returns nil")
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State, "revoked, not completed by the late nil")
		require.Equal(t, uint64(0), r.Stats().Expirations)
		require.NotContains(t, rec.kinds("a"), "completed")
	})
}

func TestRunReturnsAfterEveryHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("ok", ""))
		require.NoError(t, r.Enqueue("bad", ""))
		var returned atomic.Int32
		h := func(ctx context.Context, l *lease) error {
			<-ctx.Done()
			time.Sleep(5 * time.Second) // winding down takes a while
			returned.Add(1)
			if l.JobID == "bad" {
				return errors.New("stopped")
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 2}, h)
		synctest.Wait()
		require.Equal(t, 2, r.Stats().Leased)

		cancel()
		sleep(5*time.Second - time.Nanosecond)
		requireBlocked(t, done)
		sleep(time.Nanosecond)
		require.NoError(t, receive(t, done))
		require.Equal(t, int32(2), returned.Load(), "Run returned only after every handler")

		// Run's ctx canceled: nil completes, anything else releases.
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "ok").State)
		j := get(t, r, "bad")
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, uint64(0), r.Stats().Retries)
	})
}

func TestRunHandlerCheckpointReachesRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: noBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		var mu sync.Mutex
		var progress []string
		h := func(ctx context.Context, l *lease) error {
			mu.Lock()
			progress = append(progress, string(l.Progress))
			mu.Unlock()
			if l.Attempt == 1 {
				if err := l.Heartbeat([]byte("half")); err != nil {
					return leaserouter.Permanent(err)
				}
				return errors.New("crash")
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		synctest.Wait()
		stopRun(t, cancel, done)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"", "half"}, progress)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
	})
}

func TestRunDefaultWorkerOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		var mu sync.Mutex
		var workers []string
		h := func(ctx context.Context, l *lease) error {
			mu.Lock()
			defer mu.Unlock()
			workers = append(workers, l.WorkerID)
			return nil
		}
		for i := range 3 {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{}, h)
		synctest.Wait()
		require.Equal(t, 3, r.Stats().Succeeded)
		mu.Lock()
		require.Len(t, workers, 3)
		for _, w := range workers {
			require.NotEmpty(t, w, "a default worker ID")
		}
		mu.Unlock()
		stopRun(t, cancel, done)
	})
}

// TestNoUserCodeUnderLockRunHandlerTypedNilError: a handler returning a
// typed nil error (non-nil as an error, panicking in Error()) fails its
// attempt like any error; neither the worker nor the process dies, and
// LastError says that Error() panicked.
func TestNoUserCodeUnderLockRunHandlerTypedNilError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, MaxAttempts: 1})
		require.NoError(t, r.Enqueue("a", ""))
		h := func(ctx context.Context, l *lease) error {
			if l.JobID == "a" {
				var e *nilErr
				return e
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		synctest.Wait()

		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateDead, j.State, "a failed attempt, the last one: dead")
		require.Contains(t, j.LastError, "Error() of *leaserouter_test.nilErr panicked")

		require.NoError(t, r.Enqueue("b", ""))
		synctest.Wait()
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "b").State, "the worker goes on")
		stopRun(t, cancel, done)
	})
}
