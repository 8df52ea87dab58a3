package pgrouter

import (
	"context"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Snooze: a holder ends its lease and has the job run again later,
// without spending an attempt.

// Snooze ends the lease and has the job run again after d (see
// leaserouter's Lease.Snooze): scheduled until the database's clock + d, or
// pending at once for d == 0 (ready since now, behind the jobs ready
// before it). The attempt is not counted: the job's attempt goes back to
// what it was before this lease (as for a lease handed back unstarted),
// so a job may snooze any number of times without coming closer to dead
// (MaxAttempts). Its LastError and checkpoint are kept. It emits
// EventSnoozed, counted in Stats.Snoozed (this Router's), and wakes the
// queue's waiters; a later operation on the lease is refused with Reason
// leaserouter.LostSnoozed. d is sent in microseconds, rounded up (a
// positive d below a microsecond schedules the job for one).
//
// A negative d returns an error wrapping leaserouter.ErrInvalidOptions
// at once, with no round trip, changing nothing; a lease no longer valid
// (including after Close's revocation) returns a *LeaseLostError,
// changing nothing. One statement, in one round trip, as Release: an
// unknown outcome is resolved as Complete's is (nil if the row shows this
// lease snoozed; its event is then not emitted). From a Run handler,
// return leaserouter.Snooze(d) instead. A nil ctx means
// context.Background().
func (l *Lease[T]) Snooze(ctx context.Context, d time.Duration) error {
	if l != nil && l.via != nil { // a Client handler's view: the queue's lease acts
		return l.via.Snooze(ctx, d)
	}
	if err := contract.CheckSnooze(leaserouter.ErrInvalidOptions, d); err != nil { // the same on every backend
		return err
	}
	ctx = orBackground(ctx)
	res, answered, err := l.endByHolder(ctx, "Snooze", leaserouter.LostSnoozed, args{"delay_us": ceilMicros(d)})
	if !answered {
		return err
	}
	r := l.r
	defer r.release(l) // after the event
	r.mu.Lock()
	r.stats.Snoozed++
	r.mu.Unlock()
	r.emit(l.event(leaserouter.EventSnoozed, *res.at))
	r.notify(ctx) // ready, or a new due instant for the waiters' timers
	return nil
}
