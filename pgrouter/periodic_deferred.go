package pgrouter

// Deferred ticks: a periodic job's ticks this scheduler planned and has
// not settled. A tick joins them when planned (periodic.Due) and leaves
// once taken here, found taken by another scheduler, skipped (its Payload
// panicked, its payload does not encode) or older than the retention. It
// stays while another scheduler's transaction locks the job's row (that
// one may be stalled inside its tick for as long as its session lives:
// waiting for it would stall every periodic job of this process, and
// dropping the tick would lose it if that transaction rolls back, its
// process killed) and while its own try fails (a database error: the
// transaction's outcome is unknown, the tick's record in
// leaserouter_periodic_ticks tells on the next try). Each tick is taken
// at most once, in any order (periodic_tick.sql), so a deferred tick may be
// taken after a younger one another scheduler took meanwhile.

import (
	"context"
	"slices"
	"time"
)

// The tick transaction's bounds, set for it alone (periodic_tick.sql):
// the server ends the session of a scheduler that stops talking for
// periodicIdleTimeout between statements of its tick (stopped, cut off),
// which rolls the tick back for the others; from PostgreSQL 17, it ends
// one whose tick's transaction lasts periodicTxnTimeout (stopped in the
// middle of a statement's messages, say); a lock wait of its statements
// ends after periodicLockTimeout (an error: the tick is tried again after
// a backoff), not its COMMIT's. A deferred tick is tried again after
// periodicRetryMin, doubling up to periodicDeferredRetryMax; at most
// periodicDeferredMax ticks of a job are kept.
const (
	periodicIdleTimeout      = 5 * time.Second
	periodicTxnTimeout       = 5 * time.Second
	periodicLockTimeout      = time.Second
	periodicDeferredRetryMax = time.Second
	periodicDeferredMax      = 8
)

// retryDeferred tries the deferred ticks of e, oldest first. A tick
// taken, found taken, skipped or older than the retention on now leaves
// the list; the first whose row another transaction locks stops the
// tries (the younger ticks would find it locked too). A tick whose try
// fails stays, and the tries go on with the next (a failure may be the
// tick's own: its job's insert waiting on a conflicting one); the first
// error is returned. It stops without a try once e is removed
// (RemovePeriodic: a try in progress as it is called may still enqueue
// its tick, no later one) or Close began.
func (r *Router[T]) retryDeferred(ctx context.Context, e *periodicEntry[T], now time.Time) error {
	var first error
	for i := 0; i < len(e.deferred); {
		if ctx.Err() != nil || !r.periodicAdded(e) {
			return first
		}
		tick := e.deferred[i]
		if !now.Before(tick.Add(r.opts.Retention)) {
			e.deferred = slices.Delete(e.deferred, i, i+1)
			continue
		}
		locked, err := r.tryTick(ctx, e, tick)
		switch {
		case err != nil:
			if first == nil {
				first = err
			}
			i++
		case locked:
			return first
		default:
			e.deferred = slices.Delete(e.deferred, i, i+1)
		}
	}
	return first
}

// periodicAdded reports whether e is still the Router's periodic job of
// its name (not removed).
func (r *Router[T]) periodicAdded(e *periodicEntry[T]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.periodic.byName[e.p.Name] == e
}

// deferTick keeps tick, younger than every tick deferred, to try it.
// Past periodicDeferredMax ticks, tick takes the place of the youngest: a
// job whose row stays locked that long catches up the latest of its
// ticks, as a scheduler woken late does, and the oldest, which the
// transaction locking the row may have taken.
func (e *periodicEntry[T]) deferTick(tick time.Time) {
	if len(e.deferred) == periodicDeferredMax {
		e.deferred[len(e.deferred)-1] = tick
		return
	}
	e.deferred = append(e.deferred, tick)
}

// armDeferred brings e's next forward to the next try of its deferred
// ticks, if any, with a backoff (doubling up to periodicDeferredRetryMax)
// while some stay; with none, the backoff starts again.
func (e *periodicEntry[T]) armDeferred(now time.Time) {
	if len(e.deferred) == 0 {
		e.wait = 0
		return
	}
	e.wait = min(max(2*e.wait, periodicRetryMin), periodicDeferredRetryMax)
	if at := now.Add(e.wait); e.next.IsZero() || at.Before(e.next) {
		e.next = at
	}
}
