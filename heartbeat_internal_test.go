package leaserouter

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKeepAliveBeatRacingHolderEndIsNoRefusal: a KeepAlive beat that
// found its context live just before the holder's own Complete, Fail,
// Release or Snooze took the lock (the beat then finds the lease ended)
// is no refusal: no StaleRejections, no HeartbeatsRefused, no
// stale_rejected event; it returns the end's *LeaseLostError.
func TestKeepAliveBeatRacingHolderEndIsNoRefusal(t *testing.T) {
	ends := map[LostReason]func(l *Lease[string]) error{
		LostCompleted: func(l *Lease[string]) error { return l.Complete() },
		LostFailed:    func(l *Lease[string]) error { return l.Fail(nil) },
		LostReleased:  func(l *Lease[string]) error { return l.Release() },
		LostSnoozed:   func(l *Lease[string]) error { return l.Snooze(0) },
	}
	for reason, end := range ends {
		t.Run(string(reason), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var stale []Event
				r, err := New[string](Options{OnEvent: func(e Event) {
					if e.Kind == EventStaleRejected {
						stale = append(stale, e)
					}
				}})
				require.NoError(t, err)
				require.NoError(t, r.Enqueue("a", ""))
				l, err := r.TryAcquire("w")
				require.NoError(t, err)
				kctx, k := keepAlive(context.Background(), l, time.Second)
				require.NoError(t, end(l))
				require.Error(t, kctx.Err(), "told at the holder's end")
				// The beat's own step after its check of the context: the
				// holder's call came in between.
				_, err = k.heartbeat()
				var lost *LeaseLostError
				require.ErrorAs(t, err, &lost)
				require.Equal(t, reason, lost.Reason)
				k.stop(context.Canceled)
				require.NoError(t, r.Close(context.Background()))
				st := r.Stats()
				require.Zero(t, st.StaleRejections)
				require.Zero(t, st.HeartbeatsRefused)
				require.Empty(t, stale)
			})
		})
	}
}

// TestAuditChecksKeepAliveSchedule: Audit reports a KeepAlive scheduled
// for a lease that is not its job's current one, and a keeper that does
// not know its place in the schedule.
func TestAuditChecksKeepAliveSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, l := leasedA(t)
		_, k := keepAlive(context.Background(), l, time.Second)
		defer k.stop(context.Canceled)
		require.NoError(t, r.Audit())

		// Each corruption is undone before the check, so a failing check
		// leaves a router that stop and Close can still work on.
		r.mu.Lock()
		k.keptIndex = 3
		r.mu.Unlock()
		misplaced := r.Audit()
		r.mu.Lock()
		k.keptIndex = 0
		r.mu.Unlock()
		require.ErrorContains(t, misplaced, "heartbeat schedule is out of order or has stale positions")

		require.NoError(t, l.Complete()) // takes k off the schedule
		r.mu.Lock()
		r.kept.Push(k) // as if it had stayed
		r.mu.Unlock()
		stale := r.Audit()
		r.mu.Lock()
		r.unschedule(k)
		r.mu.Unlock()
		require.ErrorContains(t, stale, "its lease is not the job's current one")
		require.NoError(t, r.Audit())
	})
}

// leasedA returns a Router with default Options holding one job, "a",
// leased by worker "w"; the Router is closed when t ends.
func leasedA(t *testing.T) (*Router[string], *Lease[string]) {
	t.Helper()
	r, err := New[string](Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	require.NoError(t, r.Enqueue("a", ""))
	l, err := r.TryAcquire("w")
	require.NoError(t, err)
	return r, l
}
