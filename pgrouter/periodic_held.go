package pgrouter

// Ticks held by another transaction: a scheduler that finds a periodic
// job's row locked by another scheduler's tick transaction does not wait
// for it (that one may be stalled inside its tick for as long as its
// session lives, and waiting would stall every periodic job of this
// process), and does not drop the tick either (that transaction may roll
// back, its process killed): it keeps the tick and tries it again, oldest
// first, until it is taken, found taken, or older than the retention.

import (
	"context"
	"slices"
	"time"
)

// The tick transaction's bounds, set for it alone (periodic_tick.sql):
// the server ends the session of a scheduler that stops talking for
// periodicIdleTimeout inside its tick (stopped, cut off), which rolls
// the tick back for the others; a lock wait of its job's insert ends
// after periodicLockTimeout (an error, tried again after a backoff).
// A held tick is tried again after periodicRetryMin, doubling up to
// periodicHeldRetryMax; at most periodicHeldMax ticks of a job are kept.
const (
	periodicIdleTimeout  = 5 * time.Second
	periodicLockTimeout  = time.Second
	periodicHeldRetryMax = time.Second
	periodicHeldMax      = 8
)

// retryHeld tries the held ticks of e again, oldest first, and stops at
// the first still held (the row is: the younger ones wait behind it).
// The row's last tick only grows, so the oldest must be taken first: a
// younger one taken before it would refuse it for good. A tick taken,
// found taken, skipped (its Payload panicked) or older than the
// retention on now leaves the list. It returns only database errors.
func (r *Router[T]) retryHeld(ctx context.Context, e *periodicEntry[T], now time.Time) error {
	for len(e.held) > 0 {
		if tick := e.held[0]; now.Before(tick.Add(r.opts.Retention)) {
			held, err := r.tryTick(ctx, e, tick)
			if err != nil {
				return err
			}
			if held {
				return nil
			}
		}
		e.held = slices.Delete(e.held, 0, 1)
	}
	return nil
}

// hold keeps tick, younger than every tick held, to try it again. Past
// periodicHeldMax ticks, tick takes the place of the youngest: a job
// whose row stays held that long catches up the latest of its ticks, as
// a scheduler woken late does, and the oldest, which the holder may have
// held.
func (e *periodicEntry[T]) hold(tick time.Time) {
	if len(e.held) == periodicHeldMax {
		e.held[len(e.held)-1] = tick
		return
	}
	e.held = append(e.held, tick)
}

// armHeld brings e's next forward to the next try of its held ticks, if
// any, with a backoff (doubling up to periodicHeldRetryMax) while they
// stay held; with none, the backoff starts again.
func (e *periodicEntry[T]) armHeld(now time.Time) {
	if len(e.held) == 0 {
		e.wait = 0
		return
	}
	e.wait = min(max(2*e.wait, periodicRetryMin), periodicHeldRetryMax)
	if at := now.Add(e.wait); e.next.IsZero() || at.Before(e.next) {
		e.next = at
	}
}
