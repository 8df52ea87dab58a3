package leaserouter

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// watchersOf counts the lostWatchers on l. The caller holds l.r.mu.
func watchersOf[T any](l *Lease[T]) int {
	switch cur := l.lost.(type) {
	case nil:
		return 0
	case lostWatchers:
		return len(cur)
	default:
		return 1
	}
}

// TestKeepAliveCanceledLeavesNoWatcherOnItsLease: a KeepAlive whose cancel func
// was called stays on its lease's watchers (l.lost) until the lease ends:
// a holder that keeps a long lease alive step by step (KeepAlive, work,
// cancel, over and over) grows the lease's watcher list, and the keepers,
// contexts and timers behind it, without bound, and the lease's end then
// tells every one of them.
func TestKeepAliveCanceledLeavesNoWatcherOnItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, l := leasedA(t)
		const steps = 1000
		for range steps {
			_, cancel := KeepAlive(context.Background(), l, time.Second)
			cancel()
		}
		r.mu.Lock()
		n := watchersOf(l)
		r.mu.Unlock()
		require.LessOrEqual(t, n, 1, "watchers left on the lease after %d KeepAlive+cancel", steps)
		require.NoError(t, l.Complete())
	})
}

// panicky is a caller's own context type whose Value panics once armed
// (a misbehaving user ctx; the doc of KeepAlive says a ctx "may be of a
// type of the caller's own").
type panicky struct {
	context.Context
	armed *atomic.Bool
}

func (p panicky) Value(key any) any {
	if p.armed.Load() {
		panic("user ctx Value panics")
	}
	return p.Context.Value(key)
}

// TestLeaseEndCancelOfAPanickingUserContextIsRecovered: the lease-loss notes queued under the
// lock run, after Unlock, in whatever goroutine ended the lease: Cancel's
// caller here, the reaper on an expiry. Canceling a KeepAlive context
// derived from the caller's own ctx type runs that ctx's Done and Value
// (context.removeChild). One that panics (a) escapes from a call of
// someone else (here Cancel; from the reaper it kills the process), and
// (b) drops every note after it: the other KeepAlive on the lease is
// never canceled, though the lease is lost.
func TestLeaseEndCancelOfAPanickingUserContextIsRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, l := leasedA(t)

		base, stopBase := context.WithCancel(context.Background())
		defer stopBase()
		var armed atomic.Bool
		_, cancel1 := KeepAlive(panicky{base, &armed}, l, time.Second)
		k2, cancel2 := KeepAlive(context.Background(), l, time.Second)
		defer cancel2()
		armed.Store(true)

		var panicked any
		func() {
			defer func() { panicked = recover() }()
			_ = r.Cancel("a")
		}()
		armed.Store(false)
		cancel1()
		require.Nil(t, panicked, "Cancel panicked with another caller's ctx")
		require.Error(t, k2.Err(), "the other KeepAlive's ctx, after its lease was canceled")
		require.Equal(t, uint64(1), r.Stats().CallbackPanics)
	})
}
