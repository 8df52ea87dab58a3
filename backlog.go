package leaserouter

// The bounded backlog of undelivered events, and the callers that wait
// for delivery: producers of new work for room (awaitRoom), Flush for
// every event so far. The delivery goroutine (delivery.go) lets them go
// as it reports its progress. SAME RULE on every backend: the bound, and
// the producers' wait decided per call from the backlog they find until
// it is down to half (contract.EventBacklog, BacklogFull, BacklogDrained;
// delivery.Room). TUNED to this backend: the backlog is counted under
// r.mu from the outbox and an atomic count in flight, the delivery
// goroutine takes r.mu for its progress only when a caller waits or hooks
// panicked, and Flush (this backend's alone) waits on the same progress.

import (
	"context"
	"errors"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/delivery"
	"github.com/leaserouter/leaserouter/internal/goid"
)

// eventBacklog bounds the events waiting for delivery that new work may
// add: Enqueue, TryAcquire, Acquire (and Run taking its next job) wait
// while this many are undelivered, until delivery has brought the backlog
// down to half (so a steady overload wakes producers in batches, not one
// per event); the reaper waits between batches of a mass expiry. Lease
// operations and Cancel never wait, accepted or refused: their events come
// from jobs and leases the router already holds, a few per lease when it
// ends plus one per heartbeat, and a refusal adds a stale_rejected only
// for a lease not refused before while the backlog is full (holding), so
// while the producers wait the backlog grows only at the heartbeat rate of
// the leases already granted. It holds a linger's worth
// of events at the rate one caller makes them (about 7,500 in a
// millisecond of BenchmarkLifecycleHooked) with room to spare, so a dense
// stream wakes the delivery goroutine early rarely (see linger); 16384
// events are about 1.3 MB. The bound is the contract's, the same on
// every backend (contract.EventBacklog).
const eventBacklog = contract.EventBacklog

// delivered records that n more events were delivered and, when a
// caller waits for progress or hooks panicked, takes r.mu to count the
// panics and let the caller go on (progressed). Called by the delivery
// goroutine, without r.mu.
func (r *Router[T]) delivered(n int) {
	d := r.delivery
	d.inflight.Add(-int64(n))
	d.delivered.Add(uint64(n))
	if d.panics == 0 && !d.waiting.Load() {
		return
	}
	r.mu.Lock()
	r.stats.CallbackPanics += uint64(d.panics)
	d.panics = 0
	r.progressed()
	r.mu.Unlock() // not unlockAndDeliver: this goroutine is busy, nothing to hand it
}

// progressed lets go the callers that wait for delivery: producers waiting
// for room once the backlog is down to half, Flush once every event it
// waits for is delivered. The caller holds r.mu.
func (r *Router[T]) progressed() {
	d := r.delivery
	waiting := r.room.Progressed(r.backlog())
	if r.flush != nil && d.delivered.Load() >= r.flushAt {
		close(r.flush)
		r.flush = nil
	}
	d.waiting.Store(waiting || r.flush != nil)
}

// errDone is awaitRoom's report that its done channel fired.
var errDone = errors.New("leaserouter: done")

// awaitRoom waits while the event backlog is full, for a producer of new
// work (Enqueue, TryAcquire, Acquire). It is called with r.mu held and the
// Router open, and returns with r.mu held: nil when there is room (or the
// Router has no hooks, or the caller is the delivery goroutine itself, an
// OnEvent calling back, which must not wait for its own delivery),
// ErrClosed if the Router closed meanwhile, or errDone if done fired first.
func (r *Router[T]) awaitRoom(done <-chan struct{}) error {
	for r.backlogFull() {
		if r.fromHook() {
			return nil
		}
		room := r.roomChan()
		r.unlockAndDeliver() // hands the full outbox over
		select {
		case <-room:
		case <-r.closing:
		case <-done:
			r.mu.Lock()
			return errDone
		}
		r.mu.Lock()
		if r.phase != phaseOpen {
			return ErrClosed
		}
	}
	return nil
}

// fromHook reports whether the caller is OnEvent or the Logger calling
// back: r's delivery goroutine or, in a Client, any of its queues' (whose
// hooks wait for each other). It costs a goroutine ID (about a
// microsecond): for slow paths only. r has hooks.
func (r *Router[T]) fromHook() bool {
	g := goid.Current()
	if g == r.delivery.goid.Load() {
		return true
	}
	if r.peers != nil {
		for _, d := range *r.peers {
			if g == d.goid.Load() {
				return true
			}
		}
	}
	return false
}

// backlog is how many events wait for delivery. The caller holds r.mu.
func (r *Router[T]) backlog() int {
	return len(r.outbox) + int(r.delivery.inflight.Load())
}

// backlogFull reports whether eventBacklog events wait for delivery. The
// caller holds r.mu.
func (r *Router[T]) backlogFull() bool {
	return r.hooked && delivery.Full(r.backlog())
}

// roomChan returns the channel closed when the backlog is down to half,
// and tells the delivery goroutine that a producer waits. The caller holds
// r.mu.
func (r *Router[T]) roomChan() <-chan struct{} {
	if !r.room.Waiting() {
		r.delivery.waiting.Store(true)
	}
	return r.room.Wait()
}

// Flush waits until every event of a transition made before the call has
// been delivered, that is, OnEvent and the Logger have returned from it,
// or until ctx is done (it then returns ctx.Err()). Delivery is
// asynchronous, and under a dense stream goes in rounds about a
// millisecond apart (see Options.OnEvent); Flush is for the moments that
// must see every event so far: a test asserting on what its hooks saw (it
// makes a testing/synctest bubble deterministic), a metrics scrape before
// exit. Events of transitions made while it waits are not waited for. It
// returns nil at once when neither OnEvent nor Logger is set, when called
// from OnEvent or the Logger (delivery cannot wait for itself), and once
// Close has delivered every event; during Close it waits as at any time. A
// goroutine that OnEvent waits for must not call it (it would wait for
// OnEvent). A nil ctx means context.Background(). Safe for concurrent use.
func (r *Router[T]) Flush(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if !r.hooked || r.fromHook() {
		return nil
	}
	r.mu.Lock()
	// waiting before delivered is read: the delivery goroutine adds to
	// delivered before it reads waiting, so either this sees its count or
	// it sees this wait (and does not linger).
	r.delivery.waiting.Store(true)
	if r.delivery.delivered.Load() >= r.pushed {
		r.progressed() // waiting back to what the other waits need
		r.unlockAndDeliver()
		return nil
	}
	if r.flush == nil {
		r.flush = make(chan struct{})
	}
	r.flushAt = r.pushed // the latest target: a wait for an earlier one ends later, never sooner
	flushed := r.flush
	r.unlockAndDeliver() // hands the outbox over even to a lingering goroutine
	select {
	case <-flushed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
