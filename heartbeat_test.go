package leaserouter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/hook"
	"github.com/stretchr/testify/require"
)

func TestRunHeartbeatsKeepLongHandlerAlive(t *testing.T) {
	for _, interval := range []time.Duration{0, ld - time.Nanosecond} {
		t.Run(interval.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				require.NoError(t, r.Enqueue("a", ""))
				ctxErrs := make(chan error, 1)
				h := func(ctx context.Context, l *lease) error {
					time.Sleep(4*ld + ld/2)
					ctxErrs <- ctx.Err()
					return nil
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: interval}, h)
				sleep(4*ld + ld/2)
				require.NoError(t, receive(t, ctxErrs), "the handler's ctx stayed alive")
				j := get(t, r, "a")
				require.Equal(t, leaserouter.StateSucceeded, j.State)
				require.Equal(t, 1, j.Attempt)
				st := r.Stats()
				require.Equal(t, uint64(0), st.Expirations)
				require.GreaterOrEqual(t, st.Heartbeats, uint64(4))
				stopRun(t, cancel, done)
			})
		})
	}
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
		stopRun(t, cancel, done)
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
		stopRun(t, cancel, done)
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
		stopRun(t, cancel, done)
	})
}

func TestKeepAliveKeepsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, 3*time.Second)
		sleep(3*ld + ld/2)
		require.NoError(t, kctx.Err())
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateLeased, j.State)
		require.Equal(t, l.Token, j.Token)
		st := r.Stats()
		require.Equal(t, uint64(0), st.Expirations)
		require.GreaterOrEqual(t, st.Heartbeats, uint64(3))

		stop()
		stop() // idempotent
		require.Error(t, kctx.Err(), "stop cancels the context")
		sleep(ld)
		require.Equal(t, leaserouter.StatePending, get(t, r, "a").State, "no heartbeats after stop")
		require.Equal(t, uint64(1), r.Stats().Expirations)
	})
}

// TestKeepAliveLeaseOutlivesItsLateBeat: a lease KeepAlive keeps is not
// lost while the rest of the process runs on time, however late the
// goroutine of its heartbeat runs (a timer on a P that a garbage
// collection's mark worker occupies waits for the whole mark phase; a
// heartbeat's call may wait for the lock or for a mass expiry to be
// settled): the router applies each heartbeat at the instant it is due,
// before the expiry it prevents. Here the first beat's goroutine is held
// (by the Beat test hook) from its due instant, 1s, to 6s, past the
// lease's 3s; another caller looks at 4s.
func TestKeepAliveLeaseOutlivesItsLateBeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 3 * time.Second
		var (
			mu  sync.Mutex
			evs []leaserouter.Event
		)
		r := setup(t, leaserouter.Options{LeaseDuration: lease, OnEvent: func(e leaserouter.Event) {
			mu.Lock()
			evs = append(evs, e)
			mu.Unlock()
		}})
		var held atomic.Bool
		leaserouter.SetHooks(r, &hook.Hooks{Beat: func(time.Time) func(error) {
			if held.CompareAndSwap(false, true) {
				time.Sleep(5 * time.Second) // the first beat runs 5s late
			}
			return nil
		}})
		start := time.Now()
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, time.Second)

		sleep(4 * time.Second) // past the expiry the late beat was to prevent
		j, lost := get(t, r, "a"), kctx.Err()
		sleep(3 * time.Second) // the held beat has run (asserting before could wait for it in stop)
		stop()
		require.Equal(t, leaserouter.StateLeased, j.State, "the lease was lost at 4s while the process was on time")
		require.Equal(t, l.Token, j.Token)
		require.NoError(t, lost)
		require.Equal(t, start.Add(4*time.Second+lease), j.LeaseExpiry, "heartbeated at 4s, the last instant of its schedule before the look")
		require.NoError(t, l.Complete())
		require.NoError(t, r.Flush(t.Context()))
		require.Zero(t, r.Stats().Expirations)
		// Each heartbeat at an instant of its schedule, a second apart
		// (the ones a late settle skips included), none after the lease
		// would have lapsed.
		mu.Lock()
		defer mu.Unlock()
		last := start
		for _, e := range evs {
			require.NotEqual(t, leaserouter.EventLeaseExpired, e.Kind)
			if e.Kind != leaserouter.EventLeaseExtended {
				continue
			}
			require.Zero(t, e.Time.Sub(start)%time.Second, "heartbeat at %v", e.Time.Sub(start))
			require.Less(t, e.Time.Sub(last), lease, "heartbeat at %v", e.Time.Sub(start))
			last = e.Time
		}
		require.Greater(t, last.Sub(start), 5*time.Second)
	})
}

// TestKeepAliveLateInTheLeaseKeepsIt: a KeepAlive called late in a lease
// (its caller ran late after Acquire) keeps the lease from the call on:
// its first heartbeat is due an interval after the lease was granted or
// last extended, at once if that has passed, not an interval after the
// call, when the lease may be gone.
func TestKeepAliveLateInTheLeaseKeepsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 3 * time.Second
		r := setup(t, leaserouter.Options{LeaseDuration: lease})
		start := time.Now()
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		sleep(2500 * time.Millisecond)
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, time.Second)
		sleep(time.Second) // past the lease's first expiry, 3s
		j, lost := get(t, r, "a"), kctx.Err()
		stop()
		require.Equal(t, leaserouter.StateLeased, j.State, "lost before KeepAlive's first heartbeat")
		require.NoError(t, lost)
		require.Equal(t, start.Add(2500*time.Millisecond+time.Second+lease), j.LeaseExpiry, "heartbeated at once (2.5s), then a second later")
		require.NoError(t, l.Complete())
	})
}

func TestKeepAliveContextCanceledWhenLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, 3*time.Second)
		defer stop()
		sleep(time.Second)
		require.NoError(t, kctx.Err())
		require.NoError(t, r.Cancel("a"))
		// At once: no time passes, so no refused heartbeat could have told it.
		require.Error(t, kctx.Err(), "canceled the moment the lease was lost")
		var lle *leaserouter.LeaseLostError
		require.ErrorAs(t, context.Cause(kctx), &lle)
		require.Equal(t, leaserouter.LostCanceled, lle.Reason)
		require.Equal(t, leaserouter.StateCanceled, get(t, r, "a").State)

		// A lease already expired: canceled with the same cause.
		require.NoError(t, r.Enqueue("b", ""))
		lb := acquire(t, r, "w")
		sleep(ld)
		kctx2, stop2 := leaserouter.KeepAlive(context.Background(), lb, 0)
		defer stop2()
		synctest.Wait()
		require.Error(t, kctx2.Err())
		require.ErrorIs(t, context.Cause(kctx2), leaserouter.ErrLeaseLost)
	})
}

func TestKeepAliveIntervalTooLong(t *testing.T) {
	for _, interval := range []time.Duration{ld, ld + time.Nanosecond, time.Hour} {
		t.Run(interval.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				require.NoError(t, r.Enqueue("a", ""))
				l := acquire(t, r, "w")
				kctx, stop := leaserouter.KeepAlive(context.Background(), l, interval)
				defer stop()
				require.Error(t, kctx.Err(), "canceled at once")
				require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrInvalidOptions)
				require.NoError(t, l.Complete(), "the lease itself is untouched")
			})
		})
	}
}

// TestKeepAliveIntervalFloor: an interval below MinHeartbeatInterval is
// raised to it. (Before, KeepAlive(l, 1ns) made a million heartbeats in
// half a second.)
func TestKeepAliveIntervalFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, time.Nanosecond)
		defer stop()
		sleep(leaserouter.MinHeartbeatInterval - time.Nanosecond)
		require.Zero(t, r.Stats().Heartbeats)
		sleep(time.Nanosecond)
		require.EqualValues(t, 1, r.Stats().Heartbeats)
		sleep(9 * leaserouter.MinHeartbeatInterval)
		require.EqualValues(t, 10, r.Stats().Heartbeats)
		require.NoError(t, kctx.Err())
	})
}

func TestKeepAliveDefaultInterval(t *testing.T) {
	const lease9s = 9 * time.Second // default interval: 3s
	for _, interval := range []time.Duration{0, -time.Second} {
		t.Run(interval.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: lease9s})
				require.NoError(t, r.Enqueue("a", ""))
				t0 := time.Now()
				l := acquire(t, r, "w")
				kctx, stop := leaserouter.KeepAlive(context.Background(), l, interval)
				defer stop()
				sleep(3*time.Second - time.Nanosecond)
				require.NoError(t, kctx.Err())
				require.True(t, get(t, r, "a").LeaseExpiry.Before(t0.Add(3*time.Second+lease9s)),
					"no heartbeat before LeaseDuration/3")
				sleep(time.Nanosecond)
				requireTime(t, t0.Add(3*time.Second+lease9s), get(t, r, "a").LeaseExpiry,
					"heartbeat at LeaseDuration/3")
				sleep(time.Minute)
				require.NoError(t, kctx.Err())
				require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State)
			})
		})
	}
}

func TestKeepAliveCanceledWhenCloseRevokes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, 0)
		defer stop()
		ctx, cancel := context.WithTimeout(context.Background(), 3*ld)
		defer cancel()
		closed := goClose(ctx, r)
		sleep(3*ld - time.Nanosecond)
		require.NoError(t, kctx.Err(), "KeepAlive holds the lease through the drain")
		requireBlocked(t, closed)
		sleep(time.Nanosecond)
		require.ErrorIs(t, receive(t, closed), context.DeadlineExceeded)
		require.Error(t, kctx.Err())
		require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrLeaseLost)
		require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
	})
}

func TestKeepAliveContextCanceledWhenHeartbeatRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, 3*time.Second)
		defer stop()
		require.NoError(t, l.Complete()) // ended without stopping KeepAlive
		sleep(3 * time.Second)           // the next heartbeat is refused
		require.Error(t, kctx.Err())
		var lle *leaserouter.LeaseLostError
		require.ErrorAs(t, context.Cause(kctx), &lle)
		require.Equal(t, l.Token, lle.Token)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
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
			// KeepAlive's context, not derived from the handler's, was
			// told first: it is canceled already.
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
		stopRun(t, cancel, done)
	})
}
