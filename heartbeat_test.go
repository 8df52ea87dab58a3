package leaserouter_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// holdFirstBeat arms r's hooks: the first KeepAlive heartbeat, when its
// timer fires, waits in the Beat hook (holding its keeper, not the
// router's lock) until release is called, so its beat is due on the
// router's schedule and nothing has settled it; onNextLock(f) runs f once
// in the next call that takes the router's lock, holding it, before that
// call settles. Set before KeepAlive.
func holdFirstBeat(r *router) (release func(), onNextLock func(f func())) {
	var held atomic.Bool
	var next atomic.Pointer[func()]
	rel := make(chan struct{})
	leaserouter.SetHooks(r, &hook.Hooks{
		Beat: func(time.Time) func(error) {
			if held.CompareAndSwap(false, true) {
				<-rel
			}
			return nil
		},
		Locked: func() {
			if f := next.Swap(nil); f != nil {
				(*f)()
			}
		},
	})
	var once sync.Once
	return func() { once.Do(func() { close(rel) }) }, func(f func()) { next.Store(&f) }
}

// TestKeepAliveNoHeartbeatOnceItsContextIsDone: once a KeepAlive's context
// is done (here its parent canceled), no heartbeat of it extends the
// lease, not even one that came due before and is settled after, by a call
// that took the router's lock before the KeepAlive could leave the
// schedule.
func TestKeepAliveNoHeartbeatOnceItsContextIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 3 * time.Second
		r := setup(t, leaserouter.Options{LeaseDuration: lease})
		release, onNextLock := holdFirstBeat(r)
		defer release()
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		before := l.Expiry()
		parent, cancelParent := context.WithCancel(context.Background())
		kctx, stop := leaserouter.KeepAlive(parent, l, time.Second)
		defer stop()

		sleep(1500 * time.Millisecond) // the beat due at 1s waits in the hook
		onNextLock(cancelParent)       // canceled in Get's hold of the lock, before it settles
		j := get(t, r, "a")
		require.Error(t, kctx.Err())
		release()
		stop()
		require.Zero(t, r.Stats().Heartbeats, "a heartbeat was applied after KeepAlive's context was done")
		require.Equal(t, before, j.LeaseExpiry, "extended after KeepAlive's context was done")
		require.Equal(t, before, get(t, r, "a").LeaseExpiry)
	})
}

// TestKeepAliveNoHeartbeatDueAfterCancel: no heartbeat due after the
// cancel func was called extends the lease, even while cancel waits for
// the router's lock to take it off the schedule and a call holding that
// lock settles after the heartbeat came due. Real time: cancel waits for a
// sync.Mutex, which a synctest bubble cannot wait out. The heartbeat is
// due a second after the grant; cancel is normally called well before
// that, and then none may land. On a machine so busy that cancel came
// after it, the heartbeat due before cancel may land, and still no later
// one.
func TestKeepAliveNoHeartbeatDueAfterCancel(t *testing.T) {
	const lease, every = 3 * time.Second, time.Second
	r := setup(t, leaserouter.Options{LeaseDuration: lease})
	require.NoError(t, r.Enqueue("a", ""))
	l := acquire(t, r, "w")
	before := l.Expiry()
	firstDue := before.Add(every - lease) // an interval after the grant

	_, stop := leaserouter.KeepAlive(context.Background(), l, every)
	release, wait := holdLock(t, r)
	defer release()
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()  // waits for the lock
	for !leaserouter.KeepAliveQuitting(l) { // l's watchers were set by KeepAlive, in this goroutine
		runtime.Gosched()
	}
	quitBy := time.Now()                                  // cancel was called by then
	time.Sleep(time.Until(firstDue.Add(every + every/5))) // the heartbeats at 1s and 2s come due
	release()
	wait()
	<-stopped
	if quitBy.Before(firstDue) {
		require.Zero(t, r.Stats().Heartbeats, "a heartbeat due after cancel was called was applied")
		require.Equal(t, before, get(t, r, "a").LeaseExpiry)
		return
	}
	dueBefore := 1 + uint64(quitBy.Sub(firstDue)/every) // heartbeats due before cancel was called
	t.Logf("cancel was called %v after the first heartbeat was due (a busy machine): %d may land", quitBy.Sub(firstDue), dueBefore)
	require.LessOrEqual(t, r.Stats().Heartbeats, dueBefore, "a heartbeat due after cancel was called was applied")
}

// TestKeepAliveNeverScheduledOnceItsContextIsDone: a KeepAlive whose
// context is done while KeepAlive waits for the router's lock (here behind
// a mass settle, which releases the lock between batches) keeps no lease:
// the lease is lost at its expiry. Real time: the race is between
// goroutines waiting for the router's lock (a sync.Mutex, which a synctest
// bubble cannot wait out); the assertion allows a whole lease of slack.
func TestKeepAliveNeverScheduledOnceItsContextIsDone(t *testing.T) {
	const lease, every = time.Second, 300 * time.Millisecond
	r := setup(t, leaserouter.Options{LeaseDuration: lease})
	require.NoError(t, r.Enqueue("a", ""))
	l := acquire(t, r, "w")
	specs := make([]leaserouter.JobSpec[string], 5000)
	for i := range specs {
		specs[i] = leaserouter.JobSpec[string]{ID: fmt.Sprintf("s%d", i),
			Options: []leaserouter.EnqueueOption{leaserouter.WithDelay(50 * time.Millisecond)}}
	}
	_, err := r.EnqueueMany(specs)
	require.NoError(t, err)

	release, wait := holdLock(t, r)
	defer release()
	time.Sleep(100 * time.Millisecond) // the run-ats come due; the reaper waits for the lock
	parent, cancelParent := context.WithCancel(context.Background())
	type kept struct {
		ctx  context.Context
		stop context.CancelFunc
	}
	ka := make(chan kept, 1)
	go func() { // waits for the lock in KeepAlive
		c, s := leaserouter.KeepAlive(parent, l, every)
		ka <- kept{c, s}
	}()
	time.Sleep(50 * time.Millisecond)
	cancelParent() // KeepAlive's context is done; taking it off the schedule waits for the lock too
	time.Sleep(50 * time.Millisecond)
	release()
	wait()
	k := <-ka
	defer k.stop()
	<-k.ctx.Done()

	time.Sleep(2 * lease) // no KeepAlive keeps it: lost at its expiry, within a lease
	j := get(t, r, "a")
	require.NotEqual(t, leaserouter.StateLeased, j.State,
		"still leased 2s after KeepAlive's ctx was done (%d heartbeats applied)", r.Stats().Heartbeats)
}

// holdLock arms r's Locked hook so that the next call taking the lock
// (Get here) blocks inside it, holding the router's lock, until release is
// called. The returned func waits for that call to finish.
func holdLock(t *testing.T, r *router) (release func(), wait func()) {
	t.Helper()
	var armed atomic.Bool
	entered, rel, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	leaserouter.SetHooks(r, &hook.Hooks{Locked: func() {
		if armed.CompareAndSwap(true, false) {
			close(entered)
			<-rel
		}
	}})
	armed.Store(true)
	go func() {
		defer close(done)
		r.Get("other") // takes the lock, blocks in the hook, then settles
	}()
	<-entered
	var once sync.Once
	return func() { once.Do(func() { close(rel) }) }, func() { <-done }
}

// spyCtx is a caller's Context of its own type: its Done and Value are
// the caller's code.
type spyCtx struct {
	context.Context
	r     *router
	armed atomic.Bool
	under atomic.Int32 // calls made under the router's lock
}

func (c *spyCtx) Done() <-chan struct{} {
	c.look()
	return c.Context.Done()
}

func (c *spyCtx) Value(key any) any {
	c.look()
	return c.Context.Value(key)
}

func (c *spyCtx) look() {
	if c.armed.Load() && !leaserouter.LockFree(c.r) {
		c.under.Add(1)
	}
}

// TestKeepAliveContextEndsOutsideTheLock: the holder's own end of a kept
// lease (and its loss, Cancel here) cancels the KeepAlive
// context, derived from the caller's ctx, before the call returns but
// once the router's lock is released: canceling it calls the caller's
// ctx's Done and Value, which, of a type of the caller's own, are the
// caller's code.
func TestKeepAliveContextEndsOutsideTheLock(t *testing.T) {
	ends := map[string]func(*testing.T, *router, *lease){
		"Complete": func(t *testing.T, _ *router, l *lease) { require.NoError(t, l.Complete()) },
		"Fail":     func(t *testing.T, _ *router, l *lease) { require.NoError(t, l.Fail(errors.New("x"))) },
		"Release":  func(t *testing.T, _ *router, l *lease) { require.NoError(t, l.Release()) },
		"Snooze":   func(t *testing.T, _ *router, l *lease) { require.NoError(t, l.Snooze(time.Second)) },
		"Cancel":   func(t *testing.T, r *router, l *lease) { require.NoError(t, r.Cancel(l.JobID)) },
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				require.NoError(t, r.Enqueue("a", ""))
				// A deadline earlier than any the end makes (Fail's retry,
				// Snooze's run-at), so that the end does not wake the
				// reaper, which would take the lock while the caller's
				// ctx is asked (LockFree would see it held).
				require.NoError(t, r.Enqueue("later", "", leaserouter.WithDelay(time.Nanosecond)))
				l := acquire(t, r, "w")
				require.Equal(t, "a", l.JobID)
				parent, cancel := context.WithCancel(context.Background())
				defer cancel()
				spy := &spyCtx{Context: parent, r: r}
				kctx, stop := leaserouter.KeepAlive(spy, l, time.Second)
				defer stop()
				synctest.Wait() // every other goroutine asleep: LockFree is meaningful
				spy.armed.Store(true)
				end(t, r, l)
				spy.armed.Store(false)
				require.Error(t, kctx.Err(), "the KeepAlive context ends before the call returns")
				require.Zero(t, spy.under.Load(), "the caller's ctx ran under the router's lock")
			})
		})
	}
}

// TestRunHandlerEndingItsOwnLeaseCountsTheSameKeptOrNot: a Run handler
// that ends its own lease (which Run forbids) is treated the same whether
// or not a KeepAlive also watches the lease: its handler context is not
// canceled by that end, and Run's own end of the lease, after the handler
// returns, is refused and counted as a stale rejection.
func TestRunHandlerEndingItsOwnLeaseCountsTheSameKeptOrNot(t *testing.T) {
	for _, kept := range []bool{false, true} {
		t.Run(fmt.Sprintf("kept=%v", kept), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				require.NoError(t, r.Enqueue("a", ""))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				hctxErr := make(chan error, 1)
				done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, l *lease) error {
					if kept {
						_, stop := leaserouter.KeepAlive(context.Background(), l, time.Second)
						defer stop()
					}
					if err := l.Complete(); err != nil {
						return err
					}
					hctxErr <- hctx.Err()
					return nil
				})
				synctest.Wait()
				require.NoError(t, receive(t, hctxErr), "the handler's own end does not cancel its context")
				stopRun(t, cancel, done)
				require.NoError(t, r.Flush(context.Background()))
				st := r.Stats()
				require.Equal(t, uint64(1), st.StaleRejections, "Run's end after the handler's own is refused, kept or not")
				require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
			})
		})
	}
}

// TestKeepAliveContextCanceledAtOnceByCancel: in one process the
// KeepAlive of a lease is told of its loss as it happens — canceled the
// moment Cancel returns, before any heartbeat could be refused — with the
// reason. (That a refused heartbeat cancels it on every backend is the
// conformance row "workers/KeepAlive keeps a lease and reports its loss".)
func TestKeepAliveContextCanceledAtOnceByCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, 3*time.Second)
		defer stop()
		sleep(time.Second)
		require.NoError(t, kctx.Err())
		require.NoError(t, r.Cancel("a"))
		require.Error(t, kctx.Err(), "canceled the moment the lease was lost: no time passed")
		var lle *leaserouter.LeaseLostError
		require.ErrorAs(t, context.Cause(kctx), &lle)
		require.Equal(t, leaserouter.LostCanceled, lle.Reason)
	})
}
