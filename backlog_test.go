package leaserouter_test

// Tests of the backlog (backlog.go): producers wait for room, lease
// operations never do; Flush waits for every event so far.

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestBacklogBounded: while the hook is stuck, Enqueue and TryAcquire wait
// once EventBacklog events are undelivered, lease operations never do, and
// the producers go on when the backlog is down to half.
func TestBacklogBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: g.hook})
		require.NoError(t, r.Enqueue("held", ""))
		held := acquire(t, r, "w")
		n := 2 // events so far
		for n < leaserouter.EventBacklog {
			require.NoError(t, r.Enqueue(string(rune('a'+n%26))+time.Duration(n).String(), ""))
			n++
		}
		enq := make(chan error, 1)
		go func() { enq <- r.Enqueue("over", "") }()
		try := make(chan error, 1)
		go func() {
			_, err := r.TryAcquire("w")
			try <- err
		}()
		ctx, cancel := context.WithCancel(context.Background())
		acq := goAcquire(ctx, r, "w")
		synctest.Wait()
		requireBlocked(t, enq)
		requireBlocked(t, try)
		requireBlocked(t, acq)

		// Lease operations go on, adding to the backlog beyond the bound.
		for range 10 {
			sleep(time.Second)
			require.NoError(t, held.Heartbeat(nil))
		}
		cancel()
		synctest.Wait()
		require.ErrorIs(t, receive(t, acq).err, context.Canceled, "Acquire waiting for room honours its ctx")
		requireBlocked(t, enq)

		close(g.open)
		synctest.Wait()
		require.NoError(t, receive(t, enq))
		require.NoError(t, receive(t, try))
		require.NoError(t, r.Flush(t.Context())) // after a batch that large, delivery lingers
		require.EqualValues(t, leaserouter.EventBacklog+10+2, g.seen.Load())
	})
}

// TestRefusedOperationNeverWaitsForHooks: with the event backlog full and
// the hook stuck, a worker's stale lease is refused at once by every lease
// operation, again and again, while its healthy lease keeps heartbeating;
// the backlog stays bounded all the same: with the backlog full, a lease
// refused before adds no event (its refusals coalesce, counted in Stats),
// so a stale holder retrying in a loop adds one event, not one per retry.
func TestRefusedOperationNeverWaitsForHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: g.hook})
		require.NoError(t, r.Enqueue("healthy", ""))
		require.NoError(t, r.Enqueue("stale", ""))
		healthy := acquire(t, r, "w")
		stale := acquire(t, r, "w")
		require.NoError(t, r.Cancel("stale"))
		for i := 0; leaserouter.Backlog(r) < leaserouter.EventBacklog; i++ {
			require.NoError(t, r.Enqueue(strconv.Itoa(i), ""))
		}
		before := r.Stats().StaleRejections
		const rounds = leaserouter.EventBacklog // as many as the backlog holds
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range rounds {
				requireLost(t, stale.Heartbeat(nil), stale.Token, stale.Token)
				requireLost(t, stale.Complete(), stale.Token, stale.Token)
				requireLost(t, stale.Fail(nil), stale.Token, stale.Token)
				requireLost(t, stale.Release(), stale.Token, stale.Token)
			}
		}()
		synctest.Wait()
		receive(t, done) // returned, with the hook still stuck
		sleep(ld / 2)
		require.NoError(t, healthy.Heartbeat(nil), "the healthy lease is kept meanwhile")
		require.EqualValues(t, 4*rounds, r.Stats().StaleRejections-before, "every refusal counted")
		require.LessOrEqual(t, leaserouter.Backlog(r), leaserouter.EventBacklog+2,
			"one stale_rejected for the stale lease and one lease_extended beyond the bound, not one per retry")
		close(g.open)
		require.NoError(t, r.Flush(t.Context()))
	})
}

// TestStaleRetriesBoundBacklog: many stale leases, each retried in a loop
// while the hook is stuck, add at most one event each beyond the bound.
func TestStaleRetriesBoundBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: g.hook})
		const stale = 100
		var ls []*lease
		for i := range stale {
			require.NoError(t, r.Enqueue("s"+strconv.Itoa(i), ""))
			ls = append(ls, acquire(t, r, "w"))
		}
		sleep(ld) // every lease expired
		for i := 0; leaserouter.Backlog(r) < leaserouter.EventBacklog; i++ {
			require.NoError(t, r.Enqueue(strconv.Itoa(i), ""))
		}
		for range 100 {
			for _, l := range ls {
				require.ErrorIs(t, l.Heartbeat(nil), leaserouter.ErrLeaseLost)
			}
		}
		require.LessOrEqual(t, leaserouter.Backlog(r), leaserouter.EventBacklog+2*stale,
			"each stale lease adds its expiry (settled by the first refusal) and one stale_rejected")
		close(g.open)
		require.NoError(t, r.Flush(t.Context()))
	})
}

// TestFlushDenseStream: after a dense stream delivery lingers, so events
// may wait after synctest.Wait; Flush waits for every event so far, at
// once (the fake clock does not move: no linger is waited out) and the
// same in every run.
func TestFlushDenseStream(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			var seen atomic.Int64
			r := setup(t, leaserouter.Options{OnEvent: func(leaserouter.Event) { seen.Add(1) }})
			t0 := time.Now()
			const n = 2000
			for i := range n {
				require.NoError(t, r.Enqueue(strconv.Itoa(i), ""))
			}
			require.NoError(t, r.Flush(t.Context()))
			require.EqualValues(t, n, seen.Load())
			require.Zero(t, time.Since(t0), "Flush waited out a linger")
			for i := range n / 2 {
				l, err := r.TryAcquire("w")
				require.NoError(t, err)
				require.NoError(t, l.Complete(), i)
			}
			require.NoError(t, r.Flush(nilCtx))
			require.EqualValues(t, 2*n, seen.Load())
			require.Zero(t, time.Since(t0))
		})
	}
}

// TestFlushEdges: Flush without hooks, from OnEvent, with a ctx done
// while a hook is stuck, and after Close.
func TestFlushEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		plain := setup(t, leaserouter.Options{})
		require.NoError(t, plain.Enqueue("a", ""))
		require.NoError(t, plain.Flush(t.Context()), "no hooks: nothing to wait for")

		fromHook := make(chan error, 1)
		var r *router
		r = setup(t, leaserouter.Options{OnEvent: func(e leaserouter.Event) {
			if e.JobID == "from-hook" {
				fromHook <- r.Flush(context.Background())
			}
		}})
		require.NoError(t, r.Enqueue("from-hook", ""))
		synctest.Wait()
		require.NoError(t, receive(t, fromHook), "from OnEvent: returns at once, no deadlock")

		g := newGate()
		stuck := setup(t, leaserouter.Options{OnEvent: g.hook})
		require.NoError(t, stuck.Enqueue("b", ""))
		ctx, cancel := context.WithCancel(t.Context())
		flushed := make(chan error, 1)
		go func() { flushed <- stuck.Flush(ctx) }()
		synctest.Wait()
		requireBlocked(t, flushed)
		cancel()
		synctest.Wait()
		require.ErrorIs(t, receive(t, flushed), context.Canceled, "a stuck hook: Flush honours its ctx")
		go func() { flushed <- stuck.Flush(t.Context()) }()
		synctest.Wait()
		requireBlocked(t, flushed)
		close(g.open)
		synctest.Wait()
		require.NoError(t, receive(t, flushed))
		require.EqualValues(t, 1, g.seen.Load())

		require.NoError(t, stuck.Close(t.Context()))
		require.NoError(t, stuck.Flush(t.Context()), "after Close: everything is delivered")
	})
}

// TestFlushReturnsMidBatch: Flush returns once its events are delivered,
// though the batch they came in goes on (here behind a stuck hook): the
// delivery goroutine reports progress every ProgressEvery events, not
// only between batches.
func TestFlushReturnsMidBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first, last := make(chan struct{}), make(chan struct{})
		r := setup(t, leaserouter.Options{OnEvent: func(e leaserouter.Event) {
			switch e.JobID {
			case "first":
				<-first
			case "last":
				<-last
			}
		}})
		require.NoError(t, r.Enqueue("first", "")) // delivery stops here
		synctest.Wait()
		for i := range leaserouter.ProgressEvery {
			require.NoError(t, r.Enqueue(strconv.Itoa(i), ""))
		}
		flushed := make(chan error, 1)
		go func() { flushed <- r.Flush(t.Context()) }()
		synctest.Wait()
		require.NoError(t, r.Enqueue("last", "")) // after Flush's events, in the same batch
		close(first)
		synctest.Wait()
		require.NoError(t, receive(t, flushed), "Flush waits for the end of the batch")
		close(last)
	})
}
