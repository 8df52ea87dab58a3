package leaserouter_test

// The durations events carry for metrics (Event.Wait, Requeued, Held) and
// the heartbeat counts in Stats, checked to the nanosecond in a bubble.

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

func TestEventDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{
			LeaseDuration: ld, OnEvent: rec.record,
			Backoff: func(int) time.Duration { return 7 * time.Second },
		})
		type want struct {
			kind     leaserouter.EventKind
			wait     time.Duration
			requeued bool
			held     time.Duration
		}
		var wants []want
		next := 0 // events of "a" checked so far
		check := func(add ...want) {
			t.Helper()
			synctest.Wait()
			wants = append(wants, add...)
			evs := rec.of("a")
			for _, e := range evs[next:] {
				if e.Kind == leaserouter.EventEnqueued || e.Kind == leaserouter.EventRetryScheduled {
					require.Zero(t, e.Wait+e.Held, "%v", e.Kind)
					continue
				}
				w := wants[0]
				wants = wants[1:]
				require.Equal(t, w.kind, e.Kind)
				require.Equal(t, w.wait, e.Wait, "Wait of %v", e.Kind)
				require.Equal(t, w.requeued, e.Requeued, "Requeued of %v", e.Kind)
				require.Equal(t, w.held, e.Held, "Held of %v", e.Kind)
			}
			next = len(evs)
			require.Empty(t, wants, "events still to come")
		}
		acq := leaserouter.EventLeaseAcquired

		require.NoError(t, r.Enqueue("a", ""))
		sleep(2 * time.Second)
		l := acquire(t, r, "w")
		check(want{kind: acq, wait: 2 * time.Second})

		sleep(3 * time.Second)
		require.NoError(t, l.Heartbeat(nil))
		check(want{kind: leaserouter.EventLeaseExtended})
		sleep(ld) // expires ld after the heartbeat
		check(want{kind: leaserouter.EventLeaseExpired, held: 3*time.Second + ld})

		sleep(4 * time.Second)
		l = acquire(t, r, "w")
		check(want{kind: acq, wait: 4 * time.Second, requeued: true})

		sleep(time.Second)
		require.NoError(t, l.Release())
		l = acquire(t, r, "w")
		check(want{kind: leaserouter.EventReleased, held: time.Second}, want{kind: acq})

		sleep(2 * time.Second)
		require.NoError(t, l.Fail(errors.New("boom")))
		check(want{kind: leaserouter.EventFailed, held: 2 * time.Second})
		sleep(7*time.Second + time.Second) // ready at the run-at, leased a second later
		acquire(t, r, "w")
		check(want{kind: acq, wait: time.Second})

		sleep(5 * time.Second)
		require.NoError(t, r.Cancel("a"))
		check(want{kind: leaserouter.EventCanceled, held: 5 * time.Second})

		// A completion, and a revocation by Close.
		require.NoError(t, r.Enqueue("b", ""))
		lb := acquire(t, r, "w")
		sleep(6 * time.Second)
		require.NoError(t, lb.Complete())
		require.NoError(t, r.Enqueue("c", ""))
		acquire(t, r, "w")
		sleep(9 * time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, r.Close(ctx), context.Canceled)
		synctest.Wait() // Close cut short did not wait for delivery
		require.Equal(t, 6*time.Second, rec.last(t, "b").Held)
		last := rec.last(t, "c")
		require.Equal(t, leaserouter.EventReleased, last.Kind)
		require.ErrorIs(t, last.Err, leaserouter.ErrClosed)
		require.Equal(t, 9*time.Second, last.Held)
	})
}

func TestStatsHeartbeatsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NoError(t, l.Heartbeat(nil))
		require.NoError(t, l.Heartbeat(nil))
		sleep(ld)
		require.ErrorIs(t, l.Heartbeat(nil), leaserouter.ErrLeaseLost)
		require.ErrorIs(t, l.Complete(), leaserouter.ErrLeaseLost)
		st := r.Stats()
		require.Equal(t, uint64(2), st.Heartbeats)
		require.Equal(t, uint64(1), st.HeartbeatsRefused)
		require.Equal(t, uint64(2), st.StaleRejections, "a refused heartbeat is a stale rejection too")
	})
}
