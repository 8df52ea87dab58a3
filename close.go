package leaserouter

// Close: draining the leases already granted, revoking the rest a batch
// at a time, stopping the reaper and waiting for the last events.

import (
	"context"
	"runtime"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/goid"
)

// Close stops the Router. It refuses new work at once (Enqueue, Acquire,
// TryAcquire, Cancel, AddPeriodic and RemovePeriodic return ErrClosed; periodic jobs
// enqueue no more ticks; blocked Acquires return
// ErrClosed), then waits, until ctx is done, for the leases already granted
// to end (holders may still Heartbeat, Complete, Fail and Release). Leases
// still held then are revoked: their jobs go back to StatePending with the
// attempt counted, their Run and KeepAlive contexts are canceled, and
// their holders' operations are refused with ErrLeaseLost. (So with a
// context that is never done, Close waits for every held lease to end,
// which for an abandoned lease means its expiry.) It then stops the
// reaper and the scheduler of periodic jobs (which calls no Payload or
// Schedule.Next once Close has begun, and is waited for: at once, or, if
// such a call is in progress, until ctx is done), waits until the delivery goroutine has delivered every remaining
// event and ended, and returns: nil, or ctx.Err() if ctx was done first
// (draining or delivery cut short). After a Close cut short returns, the
// delivery goroutine delivers the events made before it returned — the
// undelivered backlog (at most 16384, see Options.OnEvent) and one
// released event per lease Close revoked — and no other, then ends: no
// goroutine the Router started outlives the hook calls for those events
// (the reaper has ended when Close returns, cut short or not; the
// scheduler of periodic jobs too, unless a Payload or Schedule.Next call
// outlasted ctx: it ends as that call returns). A hook that never returns
// keeps that one goroutine. A ctx already done
// when delivery is reached does not wait for it and leaves the result to
// draining alone, so Close(done ctx) of a router holding no lease returns
// nil however far delivery got. Get, Stats and
// Audit keep working on the state left. Calling Close again waits, until
// its own ctx is done, for the first call to finish and for delivery to
// end, and returns nil: Close with a done ctx revokes at once, and a later
// Close(ctx) waits for the last events. Called from OnEvent, Close does all
// of this except wait for the delivery it is part of (or, if Close was
// called before, returns nil at once); called from a periodic job's
// Payload or Schedule.Next, likewise for that call. A nil ctx means
// context.Background().
func (r *Router[T]) Close(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	r.mu.Lock()
	// Close from an OnEvent hook must not wait for the delivery it is part
	// of: the delivery goroutine goes on once the hook returns.
	g := goid.Current()
	fromHook := r.hooked && g == r.delivery.goid.Load()
	// Nor from a periodic job's Payload or Schedule.Next once Close has
	// begun: the first Close waits for that very call to return.
	fromPeriodic := r.periodics != nil && g == r.periodics.goid.Load()
	if r.phase != phaseOpen {
		r.unlockAndDeliver()
		if !fromHook && !fromPeriodic {
			// Wait for the first call, and for delivery even if the first
			// call's ctx cut it short: Close(done ctx) to revoke at once,
			// then Close(ctx) to wait for the last events.
			r.waitClosed(ctx)
		}
		return nil
	}
	r.phase = phaseDraining
	r.closingStarted.Store(true)
	close(r.closing)
	r.waiters = nil // each waiter sees r.closing
	per, inUser := r.periodics, false
	if per != nil {
		inUser = per.halt() // no user code of periodic jobs from now on
	}
	var err error
	r.settleNow() // a lease past its expiry is not one to drain
	if r.counts[StateLeased] > 0 {
		r.drained = make(chan struct{})
		drained := r.drained
		r.unlockAndDeliver()
		select {
		case <-drained:
		case <-ctx.Done():
			err = ctx.Err()
		}
		r.mu.Lock()
	}
	for r.revoke(reapBatch) {
		// Released between batches, as the reaper's passes are, so that
		// revoking a million leases does not hold the lock for all of them.
		r.unlockAndDeliver()
		runtime.Gosched()
		r.mu.Lock()
	}
	r.phase = phaseClosed
	r.unlockAndDeliver() // wakes the delivery goroutine to deliver the rest and end
	select {
	case r.kick <- struct{}{}:
	default:
	}
	if per != nil {
		per.wait(ctx, inUser)
	}
	r.reaper.Wait()
	close(r.done)
	// A ctx done already (Close(done ctx) to revoke at once) does not wait
	// for delivery, and says only whether draining was cut short, so the
	// result does not depend on how far the delivery goroutine got.
	if !fromHook && ctx.Err() == nil && !r.waitClosed(ctx) && err == nil {
		err = ctx.Err()
	}
	return err
}

// revoke settles what is due, then revokes up to limit leases still held
// (Close's end of draining), and reports whether more are held. The
// caller holds r.mu.
func (r *Router[T]) revoke(limit int) (more bool) {
	now := r.now()
	if r.settle(now, limit) {
		return true // a batch of expiries settled: the revocations in the next hold
	}
	for range limit {
		j, ok := r.leases.Peek()
		if !ok {
			return false
		}
		r.revokeLease(j, now)
	}
	return r.leases.Len() > 0
}

// waitClosed waits until the first Close has finished and the delivery
// goroutine, if any, has delivered every event and ended, or until ctx is
// done; it reports whether they did.
func (r *Router[T]) waitClosed(ctx context.Context) bool {
	if !r.hooked {
		return contract.WaitFor(ctx, r.done)
	}
	return contract.WaitFor(ctx, r.done) && contract.WaitFor(ctx, r.delivery.done)
}
