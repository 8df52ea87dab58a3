package leaserouter_test

// Tests of Run's machinery behind its contract: the handler context made
// only when used, the one heartbeat goroutine serving every worker, and the
// worker that completes a job and takes the next under one lock.

import (
	"context"
	"errors"
	"fmt"
	"math"
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
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
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
				cancel()
				synctest.Wait()
				require.NoError(t, receive(t, done))
			})
		})
	}
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
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
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

// TestRunHeartbeatsExactlyOnTime: one heartbeat goroutine serves several
// workers whose jobs start and end at different times. Every lease is
// extended at exactly grant+k*interval while its handler runs and never
// after, and a job shorter than the interval gets no heartbeat at all.
func TestRunHeartbeatsExactlyOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 3 * time.Second
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		// Job "d<n>" runs n seconds; workers take them as they come. No n
		// is a multiple of the interval, so that no heartbeat falls at the
		// instant its handler returns (their order would be a coin toss).
		lengths := []int{1, 7, 10, 2, 13, 4, 0, 8}
		for _, n := range lengths {
			require.NoError(t, r.Enqueue(fmt.Sprint("d", n), ""))
		}
		h := func(ctx context.Context, l *lease) error {
			var n int
			_, err := fmt.Sscanf(l.JobID, "d%d", &n)
			require.NoError(t, err)
			time.Sleep(time.Duration(n) * time.Second)
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 3, HeartbeatInterval: interval}, h)
		sleep(time.Minute) // long idle afterwards: the heartbeat goroutine must not beat anything
		beats := 0
		for _, n := range lengths {
			id := fmt.Sprint("d", n)
			require.Equal(t, leaserouter.StateSucceeded, get(t, r, id).State, id)
			var granted, completed time.Time
			var extended []time.Time
			for _, e := range rec.of(id) {
				switch e.Kind {
				case leaserouter.EventLeaseAcquired:
					granted = e.Time
				case leaserouter.EventLeaseExtended:
					extended = append(extended, e.Time)
				case leaserouter.EventCompleted:
					completed = e.Time
				}
			}
			require.Equal(t, time.Duration(n)*time.Second, completed.Sub(granted), id)
			var want []time.Time
			for at := granted.Add(interval); at.Before(completed); at = at.Add(interval) {
				want = append(want, at)
			}
			require.Len(t, extended, len(want), id)
			for i := range want {
				requireTime(t, want[i], extended[i], "heartbeat %d of %s", i, id)
			}
			beats += len(want)
		}
		require.Equal(t, uint64(beats), r.Stats().Heartbeats)
		require.NotZero(t, beats)
		require.Zero(t, r.Stats().Expirations)
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
	})
}

// TestRunHeartbeatAfterIdle: the heartbeat goroutine sleeps without a
// timer while no job runs, and a job started then is still extended on
// time.
func TestRunHeartbeatAfterIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		h := func(ctx context.Context, l *lease) error {
			time.Sleep(ld + ld/2)
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 2}, h)
		sleep(time.Hour)
		require.Zero(t, r.Stats().Heartbeats)
		start := time.Now()
		require.NoError(t, r.Enqueue("a", ""))
		sleep(2 * ld)
		ext := rec.ofKind(leaserouter.EventLeaseExtended)
		require.Len(t, ext, 4, "at ld/3, 2ld/3, ld and 4ld/3")
		for i, e := range ext {
			requireTime(t, start.Add(time.Duration(i+1)*(ld/3)), e.Time, "heartbeat %d", i)
		}
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
	})
}

// TestRunHeartbeatsUntilHandlerReturns: after Run's ctx is done, a
// handler still running keeps its lease by heartbeats until it returns;
// then nil completes the job and an error releases it.
func TestRunHeartbeatsUntilHandlerReturns(t *testing.T) {
	for _, result := range []error{nil, errors.New("stopped")} {
		t.Run(fmt.Sprint(result), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				require.NoError(t, r.Enqueue("a", ""))
				h := func(ctx context.Context, l *lease) error {
					time.Sleep(3 * ld) // winds down slowly, ignoring its context
					return result
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
				sleep(ld / 2)
				cancel()
				sleep(3*ld - ld/2 - time.Nanosecond)
				requireBlocked(t, done)
				st := r.Stats()
				require.Equal(t, uint64(9), st.Heartbeats, "every ld/3 (rounded down, so the 9th comes 3ns before 3ld), Run's ctx done or not")
				sleep(time.Nanosecond)
				require.NoError(t, receive(t, done))
				j := get(t, r, "a")
				want := leaserouter.StateSucceeded
				if result != nil {
					want = leaserouter.StatePending
				}
				require.Equal(t, want, j.State)
				require.Equal(t, 1, j.Attempt)
				require.Zero(t, r.Stats().Expirations)
			})
		})
	}
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
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
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

// TestRunHeartbeatIntervalFloor: a HeartbeatInterval below
// MinHeartbeatInterval is raised to it.
func TestRunHeartbeatIntervalFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		ctx, cancel := context.WithCancel(context.Background())
		release := make(chan struct{})
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: time.Nanosecond},
			func(context.Context, *lease) error { <-release; return nil })
		sleep(leaserouter.MinHeartbeatInterval - time.Nanosecond)
		require.Zero(t, r.Stats().Heartbeats)
		sleep(time.Nanosecond)
		require.EqualValues(t, 1, r.Stats().Heartbeats)
		sleep(9 * leaserouter.MinHeartbeatInterval)
		require.EqualValues(t, 10, r.Stats().Heartbeats)
		close(release)
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
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

// TestRunRespectsEventBacklog: Run taking its next job as it completes one
// waits for room like Acquire, so a slow hook bounds the backlog.
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
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
		require.LessOrEqual(t, n, leaserouter.EventBacklog+4, "backlog while the hook was stuck")
	})
}

// TestRunLeaseWatchedTwice: a Run lease also kept alive with KeepAlive is
// watched twice; when it is lost both the handler's context and
// KeepAlive's are canceled at once, with the same cause.
func TestRunLeaseWatchedTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		causes := make(chan [2]error, 1)
		kept := make(chan struct{})
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, l *lease) error {
			kctx, stop := leaserouter.KeepAlive(context.Background(), l, time.Second)
			defer stop()
			close(kept)
			<-hctx.Done()
			<-kctx.Done() // its own watcher, not its parent, tells it
			causes <- [2]error{context.Cause(hctx), context.Cause(kctx)}
			return nil
		})
		synctest.Wait()
		<-kept
		require.NoError(t, r.Cancel("a"))
		synctest.Wait()
		got := receive(t, causes)
		for _, c := range got {
			var lle *leaserouter.LeaseLostError
			require.ErrorAs(t, c, &lle)
			require.Equal(t, leaserouter.LostCanceled, lle.Reason)
		}
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
	})
}
