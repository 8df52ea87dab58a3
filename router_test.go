package leaserouter_test

// Tests of router.go: Enqueue, Get, Cancel, Acquire and TryAcquire, Close.
// Like every *_test.go file mirroring a source file, black-box through the
// exported API, with time driven by testing/synctest (helpers_test.go).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// ---------------------------------------------------------------------------
// Enqueue

func TestEnqueueDedupWithinRetentionOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{Retention: time.Minute, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", "old"))
		require.NoError(t, acquire(t, r, "w").Complete())

		sleep(time.Minute - time.Nanosecond)
		require.NotContains(t, rec.kinds("a"), "purged")
		require.ErrorIs(t, r.Enqueue("a", "new"), leaserouter.ErrDuplicate)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
		require.Equal(t, 1, r.Stats().Succeeded)

		sleep(time.Nanosecond)
		// The reaper purged it on time, without any call into the Router.
		require.Equal(t, "purged", rec.last(t, "a").Kind.String())
		requireGone(t, r, "a")
		st := r.Stats()
		require.Equal(t, uint64(1), st.Purged)
		require.Equal(t, 0, st.Succeeded, "finished jobs count only while retained")

		require.NoError(t, r.Enqueue("a", "new"))
		j := get(t, r, "a")
		require.Equal(t, "new", j.Payload)
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 0, j.Attempt)
		require.Zero(t, j.Token)
	})
}

func TestEnqueueInvalidJob(t *testing.T) {
	tests := []struct {
		name string
		id   string
		opts []leaserouter.EnqueueOption
	}{
		{"empty ID", "", nil},
		{"WithMaxAttempts(0)", "a", []leaserouter.EnqueueOption{leaserouter.WithMaxAttempts(0)}},
		{"WithMaxAttempts(-1)", "a", []leaserouter.EnqueueOption{leaserouter.WithMaxAttempts(-1)}},
		{"negative WithDelay", "a", []leaserouter.EnqueueOption{leaserouter.WithDelay(-time.Nanosecond)}},
		{"negative WithDelay after a good option", "a", []leaserouter.EnqueueOption{
			leaserouter.WithPriority(3), leaserouter.WithDelay(-time.Hour)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{OnEvent: rec.record})
				err := r.Enqueue(tt.id, "p", tt.opts...)
				require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
				require.Equal(t, leaserouter.Stats{}, r.Stats(), "nothing stored or counted")
				requireGone(t, r, tt.id)
				requireNoJob(t, r)
				synctest.Wait()
				require.Empty(t, rec.all(), "no event for a refused job")
				if tt.id != "" {
					require.NoError(t, r.Enqueue(tt.id, "p"), "the ID is still free")
				}
			})
		})
	}
}

func TestClosedRouterRefusesWorkAndStillAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", "x"))
		require.NoError(t, r.Enqueue("s", "", leaserouter.WithDelay(10*time.Second)))
		require.NoError(t, r.Close(context.Background()))

		require.ErrorIs(t, r.Enqueue("b", ""), leaserouter.ErrClosed)
		l, err := r.TryAcquire("w")
		require.ErrorIs(t, err, leaserouter.ErrClosed)
		require.Nil(t, l)
		l, err = r.Acquire(context.Background(), "w")
		require.ErrorIs(t, err, leaserouter.ErrClosed)
		require.Nil(t, l)
		require.ErrorIs(t, r.Cancel("a"), leaserouter.ErrClosed)
		require.ErrorIs(t, r.Run(context.Background(), leaserouter.WorkerOptions{},
			func(context.Context, *lease) error { return nil }), leaserouter.ErrClosed)
		require.NoError(t, r.Close(context.Background()), "second Close")

		// Get, Stats and Audit answer from the frozen state.
		sleep(time.Hour)
		require.Equal(t, "x", get(t, r, "a").Payload)
		require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
		require.Equal(t, leaserouter.StateScheduled, get(t, r, "s").State, "nothing is settled after Close")
		st := r.Stats()
		require.Equal(t, 1, st.Pending)
		require.Equal(t, 1, st.Scheduled)
		require.Equal(t, uint64(2), st.Enqueued)
		require.NoError(t, r.Audit())
	})
}

// ---------------------------------------------------------------------------
// Get

func TestGetReturnsACopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", "payload"))
		l := acquire(t, r, "w")
		require.NoError(t, l.Heartbeat([]byte("abc")))

		j := get(t, r, "a")
		j.Progress[0] = 'X'
		j.State = leaserouter.StateDead
		j.Owner = "thief"
		j = get(t, r, "a")
		require.Equal(t, "abc", string(j.Progress))
		require.Equal(t, leaserouter.StateLeased, j.State)
		require.Equal(t, "w", j.Owner)

		require.NoError(t, l.Release())
		l2 := acquire(t, r, "w")
		l2.Progress[0] = 'Y' // the lease's checkpoint is a copy too
		require.Equal(t, "abc", string(get(t, r, "a").Progress))
		got := get(t, r, "a").Progress
		require.NoError(t, l2.Heartbeat([]byte("xyz")))
		require.Equal(t, "abc", string(got), "a returned Progress never aliases the router's buffer")
		require.Equal(t, "xyz", string(get(t, r, "a").Progress))
	})
}

// ---------------------------------------------------------------------------
// Cancel

// TestCancelAfterExpiryCarriesLatestToken: a job whose lease expired is
// pending when canceled, and its canceled event (like a duplicate Enqueue's)
// carries the expired lease's token: no event of the job after
// lease_acquired carries an older one. (Before, they carried 0.)
func TestCancelAfterExpiryCarriesLatestToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		sleep(ld)
		require.ErrorIs(t, r.Enqueue("a", ""), leaserouter.ErrDuplicate)
		require.NoError(t, r.Cancel("a"))
		synctest.Wait()
		require.Equal(t, []string{"enqueued", "lease_acquired", "lease_expired", "duplicate", "canceled"}, rec.kinds("a"))
		for _, e := range rec.of("a")[1:] {
			require.Equal(t, l.Token, e.Token, "%v", e.Kind)
		}
	})
}

// ---------------------------------------------------------------------------
// Acquire

func TestAcquireWokenByEnqueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		ch := goAcquire(context.Background(), r, "w")
		sleep(time.Hour)
		requireBlocked(t, ch)
		require.NoError(t, r.Enqueue("a", "x"))
		synctest.Wait()
		res := receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, "a", res.l.JobID)
		require.Equal(t, "x", res.l.Payload)
		require.Equal(t, "w", res.l.WorkerID)
		require.Equal(t, 1, res.l.Attempt)
	})
}

func TestAcquireWokenByRunAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("late", "", leaserouter.WithDelay(time.Hour)))
		ch := goAcquire(context.Background(), r, "w")
		synctest.Wait()
		// An earlier deadline re-arms the reaper.
		require.NoError(t, r.Enqueue("soon", "", leaserouter.WithDelay(10*time.Second)))
		sleep(10*time.Second - time.Nanosecond)
		requireBlocked(t, ch)
		sleep(time.Nanosecond)
		res := receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, "soon", res.l.JobID)
	})
}

func TestAcquireWokenByLeaseExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l1 := acquire(t, r, "w1")
		ch := goAcquire(context.Background(), r, "w2")
		sleep(ld - time.Nanosecond)
		requireBlocked(t, ch)
		sleep(time.Nanosecond)
		res := receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, "a", res.l.JobID)
		require.Equal(t, 2, res.l.Attempt)
		require.Greater(t, res.l.Token, l1.Token)
	})
}

func TestAcquireWokenByReleaseAndFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: noBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		l1 := acquire(t, r, "w1")
		ch := goAcquire(context.Background(), r, "w2")
		synctest.Wait()
		requireBlocked(t, ch)
		require.NoError(t, l1.Release())
		synctest.Wait()
		res := receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, 2, res.l.Attempt)

		ch = goAcquire(context.Background(), r, "w3")
		synctest.Wait()
		requireBlocked(t, ch)
		require.NoError(t, res.l.Fail(errors.New("boom"))) // zero backoff: ready at once
		synctest.Wait()
		res = receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, 3, res.l.Attempt)
	})
}

func TestAcquireContextCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		canceled := goAcquire(ctx, r, "gone")
		live := goAcquire(context.Background(), r, "live")
		synctest.Wait()
		cancel()
		synctest.Wait()
		res := receive(t, canceled)
		require.ErrorIs(t, res.err, context.Canceled)
		require.Nil(t, res.l)
		requireBlocked(t, live)

		// The canceled waiter takes no job and swallows no wake-up.
		require.NoError(t, r.Enqueue("a", ""))
		synctest.Wait()
		res = receive(t, live)
		require.NoError(t, res.err)
		require.Equal(t, "a", res.l.JobID)
		require.Equal(t, uint64(1), r.Stats().LeasesGranted)
	})
}

// flipCtx is a context whose Err is nil for its first n calls and
// context.Canceled after, while Done never closes: it is canceled at an
// exact step of Acquire.
type flipCtx struct {
	context.Context
	mu    sync.Mutex
	calls int
	n     int
}

func (c *flipCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.calls > c.n {
		return context.Canceled
	}
	return nil
}

// TestAcquireWokenWithCtxCanceledPassesWakeOn: a waiter woken for a job
// whose ctx is canceled at any step after the wake-up either takes the job
// or passes the wake-up on; the next waiter never sleeps beside a ready
// job. (Before, a ctx canceled between the post-wake check and the next
// check, n = 2, returned without passing it on.)
func TestAcquireWokenWithCtxCanceledPassesWakeOn(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprint("Err nil for ", n, " calls"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{})
				first := goAcquire(&flipCtx{Context: context.Background(), n: n}, r, "first")
				synctest.Wait()
				second := goAcquire(context.Background(), r, "second")
				synctest.Wait()
				require.NoError(t, r.Enqueue("a", ""))
				synctest.Wait()
				res := receive(t, first)
				if res.err == nil {
					require.Equal(t, "a", res.l.JobID)
					requireBlocked(t, second)
					return
				}
				require.ErrorIs(t, res.err, context.Canceled)
				got := receive(t, second)
				require.NoError(t, got.err, "the wake-up was passed on")
				require.Equal(t, "a", got.l.JobID)
			})
		})
	}
}

func TestAcquireDeadlineExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ch := goAcquire(ctx, r, "w")
		sleep(10*time.Second - time.Nanosecond)
		requireBlocked(t, ch)
		sleep(time.Nanosecond)
		res := receive(t, ch)
		require.ErrorIs(t, res.err, context.DeadlineExceeded)
		require.Nil(t, res.l)
		require.Equal(t, leaserouter.Stats{}, r.Stats())
	})
}

// A job becoming ready at the very instant of the deadline is either handed
// out or left pending; it is never taken and dropped.
func TestAcquireDeadlineSwallowsNoJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", "", leaserouter.WithDelay(10*time.Second)))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ch := goAcquire(ctx, r, "w")
		sleep(10 * time.Second)
		res := receive(t, ch)
		j := get(t, r, "a")
		if res.err != nil {
			require.ErrorIs(t, res.err, context.DeadlineExceeded)
			require.Nil(t, res.l)
			require.Equal(t, leaserouter.StatePending, j.State)
			require.Equal(t, 0, j.Attempt)
			require.Equal(t, uint64(0), r.Stats().LeasesGranted)
			require.Equal(t, "a", acquire(t, r, "w2").JobID)
		} else {
			require.Equal(t, leaserouter.StateLeased, j.State)
			require.Equal(t, res.l.Token, j.Token)
			require.Equal(t, uint64(1), r.Stats().LeasesGranted)
		}

		// A ctx already done with a job ready: ctx.Err() and nothing taken, or the job.
		require.NoError(t, r.Enqueue("b", ""))
		done, cancelDone := context.WithCancel(context.Background())
		cancelDone()
		before := r.Stats().LeasesGranted
		l, err := r.Acquire(done, "w")
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, before, r.Stats().LeasesGranted)
			require.Equal(t, leaserouter.StatePending, get(t, r, "b").State)
		} else {
			require.Equal(t, l.Token, get(t, r, l.JobID).Token)
		}
	})
}

func TestAcquireNilContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		var nilCtx context.Context
		l, err := r.Acquire(nilCtx, "w")
		require.NoError(t, err)
		require.Equal(t, "a", l.JobID)
	})
}

func TestCloseWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		a, b := goAcquire(context.Background(), r, "a"), goAcquire(context.Background(), r, "b")
		synctest.Wait()
		requireBlocked(t, a)
		require.NoError(t, r.Close(context.Background()))
		synctest.Wait()
		for _, ch := range []<-chan result{a, b} {
			res := receive(t, ch)
			require.ErrorIs(t, res.err, leaserouter.ErrClosed)
			require.Nil(t, res.l)
		}
	})
}

// ---------------------------------------------------------------------------
// Close

func TestCloseWithDoneContextAndNoLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, r.Close(ctx), "nothing to drain, nothing cut short")
	})
}

// A lease that expires while Close drains has ended: the drain is over.
func TestCloseDrainEndsWhenLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		closed := goClose(context.Background(), r)
		sleep(ld - time.Nanosecond)
		requireBlocked(t, closed)
		sleep(time.Nanosecond)
		require.NoError(t, receive(t, closed))
		requireLost(t, l.Complete(), l.Token, l.Token)
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 1, j.Attempt)
	})
}

// TestCloseCutShortLeavesNoGoroutine: Close cut short by its ctx, with a
// hook stuck and leases held, returns ctx.Err() at its deadline; every
// goroutine the Router started ends once the hook returns (the bubble
// fails the test if one is left), and what is delivered after Close
// returned is exactly what was made before it: the backlog and Close's
// own revocations, nothing later.
func TestCloseCutShortLeavesNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		rec := &recorder{}
		r, err := leaserouter.New[string](leaserouter.Options{LeaseDuration: ld, OnEvent: func(e leaserouter.Event) {
			g.hook(e)
			rec.record(e)
		}})
		require.NoError(t, err)
		for i := range 100 {
			require.NoError(t, r.Enqueue(strconv.Itoa(i), ""))
		}
		held := acquire(t, r, "w")
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		require.ErrorIs(t, r.Close(ctx), context.DeadlineExceeded)
		made := r.Stats()
		requireLost(t, held.Complete(), held.Token, held.Token)
		close(g.open) // the hook returns: everything made is delivered, then the goroutine ends
		synctest.Wait()
		require.Len(t, rec.all(), 100+2, "100 enqueued, the grant, Close's revocation; nothing after it")
		require.Equal(t, leaserouter.EventReleased, rec.last(t, "0").Kind)
		require.Equal(t, made, r.Stats(), "nothing changed after Close")
	})
}
