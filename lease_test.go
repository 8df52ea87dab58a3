package leaserouter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/hook"
	"github.com/leaserouter/leaserouter/internal/routertest"
	"github.com/stretchr/testify/require"
)

func TestComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		sleep(time.Second)
		require.NoError(t, l.Complete())

		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateSucceeded, j.State)
		require.Empty(t, j.Owner)
		require.True(t, j.LeaseExpiry.IsZero())
		require.Equal(t, l.Token, j.Token)
		require.Equal(t, 1, j.Attempt)
		st := r.Stats()
		require.Equal(t, 1, st.Succeeded)
		require.Equal(t, 0, st.Leased)

		// Every operation on the ended lease is refused and changes nothing else.
		ops := []func() error{
			l.Complete,
			func() error { return l.Heartbeat([]byte("x")) },
			func() error { return l.Fail(errors.New("x")) },
			l.Release,
		}
		for i, op := range ops {
			lle := requireLost(t, op(), l.Token, l.Token)
			require.Equal(t, leaserouter.LostCompleted, lle.Reason)
			require.Equal(t, j, get(t, r, "a"))
			st.StaleRejections++
			if i == 1 { // the heartbeat
				st.HeartbeatsRefused++
			}
			require.Equal(t, st, r.Stats(), "op %d", i)
		}
		requireNoJob(t, r)
		synctest.Wait()
		require.Equal(t, []string{"enqueued", "lease_acquired", "completed",
			"stale_rejected", "stale_rejected", "stale_rejected", "stale_rejected"}, rec.kinds("a"))
	})
}

func TestStaleOperationsRefused(t *testing.T) {
	ops := []struct {
		name string
		op   func(*lease) error
	}{
		{"Heartbeat", func(l *lease) error { return l.Heartbeat([]byte("stale")) }},
		{"HeartbeatNil", func(l *lease) error { return l.Heartbeat(nil) }},
		{"Complete", (*lease).Complete},
		{"Fail", func(l *lease) error { return l.Fail(errors.New("stale")) }},
		{"FailPermanent", func(l *lease) error { return l.Fail(leaserouter.Permanent(errors.New("stale"))) }},
		{"Release", (*lease).Release},
	}
	for _, tt := range ops {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: noBackoff, OnEvent: rec.record})
				require.NoError(t, r.Enqueue("a", ""))
				old := acquire(t, r, "w1")
				require.NoError(t, old.Heartbeat([]byte("old")))
				sleep(ld)
				cur := acquire(t, r, "w2")
				require.NoError(t, cur.Heartbeat([]byte("cur")))
				require.Greater(t, cur.Token, old.Token)
				before, stats := get(t, r, "a"), r.Stats()

				err := tt.op(old)
				lle := requireLost(t, err, old.Token, cur.Token)
				require.Equal(t, "a", lle.JobID)
				// The job has a newer lease: whatever ended this one, it is
				// superseded.
				require.Equal(t, leaserouter.LostSuperseded, lle.Reason)
				require.Equal(t, before, get(t, r, "a"), "a refused operation changes nothing")
				stats.StaleRejections++
				if strings.HasPrefix(tt.name, "Heartbeat") {
					stats.HeartbeatsRefused++
				}
				require.Equal(t, stats, r.Stats())

				synctest.Wait()
				e := rec.last(t, "a")
				require.Equal(t, leaserouter.EventStaleRejected, e.Kind)
				require.Equal(t, old.Token, e.Token, "stale_rejected carries the refused token")
				require.ErrorIs(t, e.Err, leaserouter.ErrLeaseLost)
				var eLLE *leaserouter.LeaseLostError
				require.ErrorAs(t, e.Err, &eLLE)
				require.Equal(t, old.Token, eLLE.Token)

				require.NoError(t, cur.Complete(), "the current lease is undisturbed")
			})
		})
	}
}

// asLeaseLostValue calls errors.As with a LeaseLostError value target,
// reporting a panic instead of crashing the test binary. The target goes
// through an any so that vet's errorsas check does not reject the call.
func asLeaseLostValue(err error) (v leaserouter.LeaseLostError, ok bool, panicked any) {
	defer func() { panicked = recover() }()
	var target any = &v
	ok = errors.As(err, target)
	return v, ok, nil
}

// The brief: errors.As works with a *LeaseLostError target and also with a
// LeaseLostError value target.
func TestLeaseLostErrorAsValueTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NoError(t, l.Release())
		err := l.Complete()
		lle := requireLost(t, err, l.Token, l.Token)
		require.Equal(t, leaserouter.LostReleased, lle.Reason)

		v, ok, panicked := asLeaseLostValue(err)
		require.Nil(t, panicked, "errors.As with a LeaseLostError value target panicked")
		require.True(t, ok)
		require.Equal(t, *lle, v)
	})
}

func TestNilLease(t *testing.T) {
	var l *lease
	// Each refusal is a value of its own: editing one changes no other.
	var first *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(), &first)
	first.Reason, first.JobID = "edited", "edited"
	var second *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(), &second)
	require.Equal(t, leaserouter.LostNilLease, second.Reason)
	require.Empty(t, second.JobID)

	require.ErrorIs(t, l.Heartbeat(nil), leaserouter.ErrLeaseLost)
	require.ErrorIs(t, l.Complete(), leaserouter.ErrLeaseLost)
	require.ErrorIs(t, l.Fail(nil), leaserouter.ErrLeaseLost)
	require.ErrorIs(t, l.Release(), leaserouter.ErrLeaseLost)
	require.True(t, l.Expiry().IsZero())
}

func TestRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w1")
		require.NoError(t, l.Release())
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State, "pending at once")
		require.Equal(t, 1, j.Attempt, "the attempt counts")
		require.Empty(t, j.Owner)
		require.True(t, j.LeaseExpiry.IsZero())
		lle := requireLost(t, l.Release(), l.Token, l.Token)
		require.Equal(t, leaserouter.LostReleased, lle.Reason)

		l2 := acquire(t, r, "w2")
		require.Equal(t, 2, l2.Attempt)
		synctest.Wait()
		rel := rec.ofKind(leaserouter.EventReleased)
		require.Len(t, rel, 1)
		require.Equal(t, l.Token, rel[0].Token)
		require.Equal(t, "w1", rel[0].WorkerID)
		require.Equal(t, 1, rel[0].Attempt)
	})
}

// TestPermanentWrapsItsError: Permanent(nil) is nil; Permanent(err) is
// err for errors.Is and says what err says. (What Fail does with it is
// the conformance row "attempts/Permanent fails at once".)
func TestPermanentWrapsItsError(t *testing.T) {
	require.NoError(t, leaserouter.Permanent(nil))
	base := errors.New("bad input")
	perm := leaserouter.Permanent(base)
	require.ErrorIs(t, perm, base)
	require.Equal(t, base.Error(), perm.Error())
}

func TestEmptyWorkerID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "")
		require.Empty(t, l.WorkerID)
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateLeased, j.State)
		require.Empty(t, j.Owner)
		require.NoError(t, l.Complete())
	})
}

// TestIsPermanent: Permanent errors are told apart, wrapped or not.
func TestIsPermanent(t *testing.T) {
	base := errors.New("bad input")
	require.True(t, leaserouter.IsPermanent(leaserouter.Permanent(base)))
	require.True(t, leaserouter.IsPermanent(fmt.Errorf("job 7: %w", leaserouter.Permanent(base))))
	require.False(t, leaserouter.IsPermanent(base))
	require.False(t, leaserouter.IsPermanent(nil))
}

// nilErr is an error type whose Error dereferences its receiver: a typed
// nil *nilErr returned as an error panics when its message is read.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// unwrapPanics panics in Unwrap, which errors.As reaches.
type unwrapPanics struct{}

func (unwrapPanics) Error() string { return "unwrap panics" }
func (unwrapPanics) Unwrap() error { panic("unwrap") }

// TestNoUserCodeUnderLockFailWithPanickingError: Fail reads its cause's
// Error() outside the router's lock, recovered. A typed nil error fails
// the attempt with a LastError saying Error() panicked; the router is not
// left locked (every later call, Close included, answers), and events and
// the Logger get an error whose Error() does not panic. Real time, not a
// bubble: a goroutine blocked on a locked mutex is not durably blocked, so
// a bubble would hang where this test must fail.
func TestNoUserCodeUnderLockFailWithPanickingError(t *testing.T) {
	rec := &recorder{}
	logs := &routertest.LogRecorder{}
	// Not setup: its cleanup's Close would hang on a lock left held.
	r, err := leaserouter.New[string](leaserouter.Options{Backoff: noBackoff, OnEvent: rec.record, Logger: slog.New(logs)})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue("a", ""))
	var typedNil *nilErr
	l := acquire(t, r, "w")
	require.NotPanics(t, func() { require.NoError(t, l.Fail(typedNil)) })
	requireUnlocked(t, r)
	j := get(t, r, "a")
	require.Equal(t, leaserouter.StatePending, j.State, "the attempt failed and is retried")
	require.Contains(t, j.LastError, "Error() of *leaserouter_test.nilErr panicked")
	require.Contains(t, j.LastError, "nil pointer dereference")

	require.NoError(t, r.Flush(context.Background()))
	failed := rec.ofKind(leaserouter.EventFailed)
	require.Len(t, failed, 1)
	require.Equal(t, j.LastError, failed[0].Err.Error(), "the event's error reads safely")
	var got *nilErr
	require.ErrorAs(t, failed[0].Err, &got, "and unwraps to the cause")
	require.Contains(t, logs.Messages(), "failed")
	require.Zero(t, r.Stats().CallbackPanics, "the Logger read the error without a panic")

	// Unwrap panicking on the way to the Permanent check: not permanent.
	require.NotPanics(t, func() { require.NoError(t, acquire(t, r, "w").Fail(unwrapPanics{})) })
	requireUnlocked(t, r)
	require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
	require.Equal(t, "unwrap panics", get(t, r, "a").LastError)
	require.NoError(t, r.Close(context.Background()), "the router is not left locked")
}

// requireUnlocked fails the test if r does not answer Stats within a
// generous real-time bound: its lock was left held.
func requireUnlocked(t *testing.T, r *router) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Stats()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the router's lock is still held: Stats does not return")
	}
}

// TestHeartbeatCopiesItsCheckpointOutsideTheLock: a heartbeat's
// checkpoint is copied before the router's lock is taken, so the hold
// does not grow with it (a heartbeat carrying 1 MiB does not make the
// other leases' heartbeats wait for the copy), and the stored checkpoint
// is still a copy of the caller's. (Before, it was copied under the lock.)
func TestHeartbeatCopiesItsCheckpointOutsideTheLock(t *testing.T) {
	const size = 1 << 20
	r := setup(t, leaserouter.Options{})
	require.NoError(t, r.Enqueue("a", ""))
	l := acquire(t, r, "w")
	t.Cleanup(func() { _ = l.Complete() }) // before Close, which would wait for it
	checkpoint := bytes.Repeat([]byte{1}, size)
	most := maxAllocatedPerHold(r)
	require.NoError(t, l.Heartbeat(checkpoint))
	require.Less(t, most(), uint64(size/4), "bytes allocated in one hold of the lock")
	checkpoint[0] = 2
	require.Equal(t, byte(1), get(t, r, "a").Progress[0], "the stored checkpoint is a copy")
}

// TestGrantCopiesTheCheckpointOutsideTheLock: a lease granted on a job
// with a checkpoint gets its copy (Lease.Progress) after the router's lock
// is released, by every way of acquiring, so the hold does not grow with
// the checkpoint; the copy is the lease's own. (Before, the grant copied
// it under the lock.)
func TestGrantCopiesTheCheckpointOutsideTheLock(t *testing.T) {
	const size = 1 << 20
	ctx := t.Context()
	one := func(ls []*lease, err error) (*lease, error) {
		if len(ls) != 1 {
			return nil, fmt.Errorf("%d leases, %w", len(ls), err)
		}
		return ls[0], err
	}
	for name, take := range map[string]func(r *router) (*lease, error){
		"TryAcquire":     func(r *router) (*lease, error) { return r.TryAcquire("w") },
		"Acquire":        func(r *router) (*lease, error) { return r.Acquire(ctx, "w") },
		"TryAcquireMany": func(r *router) (*lease, error) { return one(r.TryAcquireMany("w", 4)) },
		"AcquireMany":    func(r *router) (*lease, error) { return one(r.AcquireMany(ctx, "w", 4)) },
	} {
		t.Run(name, func(t *testing.T) {
			r := setup(t, leaserouter.Options{})
			require.NoError(t, r.Enqueue("a", ""))
			l := acquire(t, r, "w")
			require.NoError(t, l.Heartbeat(bytes.Repeat([]byte{1}, size)))
			require.NoError(t, l.Release())
			most := maxAllocatedPerHold(r)
			l, err := take(r)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Complete() }) // before Close, which would wait for it
			require.Less(t, most(), uint64(size/4), "bytes allocated in one hold of the lock")
			require.True(t, bytes.Equal(bytes.Repeat([]byte{1}, size), l.Progress), "the lease carries the checkpoint")
			l.Progress[0] = 2
			require.Equal(t, byte(1), get(t, r, "a").Progress[0], "the lease's checkpoint is its own copy")
		})
	}
}

// TestLeaseExpiryCountsKeepAliveHeartbeats: Lease.Expiry settles first, so
// it counts the KeepAlive heartbeats due by now even when the goroutine
// that makes them runs late and no other call has come: it says what any
// other call would, whether or not the reaper ran.
func TestLeaseExpiryCountsKeepAliveHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 3 * time.Second
		r := setup(t, leaserouter.Options{LeaseDuration: lease})
		rel := make(chan struct{})
		var held atomic.Bool
		leaserouter.SetHooks(r, &hook.Hooks{Beat: func(time.Time) func(error) {
			if held.CompareAndSwap(false, true) {
				<-rel // the first beat's goroutine runs late: from 1s until released
			}
			return nil
		}})
		start := time.Now()
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		_, stop := leaserouter.KeepAlive(context.Background(), l, time.Second)
		sleep(2500 * time.Millisecond) // no call since 0s; the reaper is armed for 3s
		exp := l.Expiry()
		j := get(t, r, "a")
		close(rel)
		stop()
		require.Equal(t, leaserouter.StateLeased, j.State)
		requireTime(t, j.LeaseExpiry, exp, "Lease.Expiry at 2.5s (Get says %v, Expiry %v after start)",
			j.LeaseExpiry.Sub(start), exp.Sub(start))
		require.Equal(t, start.Add(2*time.Second+lease), exp, "heartbeated at 2s")
	})
}
