package pgrouter

// Periodic jobs of a Client's Kind: AddPeriodic and RemovePeriodic. They
// are the periodic jobs of the Kind's queue's Router (periodic.go), whose
// scheduler and whose taking of each tick in the database they use as
// they are; the Kind only encodes the payload (as Kind.Enqueue does) and
// gives the ticks' jobs its kind.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// AddPeriodic schedules p's job, a job of this kind, on the kind's queue
// (or the queue a leaserouter.WithQueue among p.Options names), as
// Router.AddPeriodic does: at each tick of p.Schedule the job
// leaserouter.TickID(p.Name, tick) is enqueued with the payload
// p.Payload(tick) as JSON (the zero T if Payload is nil), p.Options and
// the tick as its run-at, and runs the kind's handler in whichever
// process registered the kind. Exactly one job per tick, whatever the
// number of processes that add p on the queue (the database takes each
// tick once); the ticks, the rule for a late scheduler, the deferred
// ticks and the reports are Router.AddPeriodic's. A payload that does not
// encode as JSON skips the tick, reported at level Error. The ticks are
// enqueued by the queue's scheduler goroutine, stopped by Stop (which
// waits for a Payload call in progress until its ctx is done).
//
// AddPeriodic may be called before Start: the ticks' jobs wait in the
// queue, as jobs enqueued before Start do. A periodic job's Name is
// unique within its queue: the Kinds of a Client share the queue's names,
// and a name added by another Kind of this Client is refused. Across
// processes, the processes that add a name on a queue should add it with
// the same Kind and Schedule: the database takes each tick once, for
// whichever of them gets to it first.
//
// Errors, before any round trip: an error wrapping
// leaserouter.ErrInvalidOptions, and nothing added, for a p
// Router.AddPeriodic refuses (the same checks and messages), for a
// WithQueue naming a queue the Client does not have, and for a Name
// already added on the queue in this Client (by this Kind or another, and
// not removed); leaserouter.ErrClosed once Stop has closed the queue.
// Then an error wrapping the driver's if the registration failed (one
// round trip; nothing is scheduled). A nil Kind (or one not made by
// Register) returns an error wrapping ErrInvalidOptions. A nil ctx means
// context.Background(); ctx bounds the registration only. Safe for
// concurrent use; p.Options is copied.
func (k *Kind[T]) AddPeriodic(ctx context.Context, p Periodic[T]) error {
	if k == nil || k.c == nil {
		return fmt.Errorf("%w: a Kind not made by Register", leaserouter.ErrInvalidOptions)
	}
	queue := contract.QueueOf(p.Options, k.queue)
	q := k.c.queues[queue]
	if q == nil {
		return contract.UnknownPeriodicQueue(leaserouter.ErrInvalidOptions, p.Name, queue)
	}
	payload, name := p.Payload, p.Name
	return q.r.addPeriodic(ctx, Periodic[json.RawMessage]{Name: p.Name, Schedule: p.Schedule, Options: p.Options}, k.name,
		// The payload as Kind.Enqueue encodes it; a panic of the user's
		// Payload goes through, recovered and reported by the scheduler
		// as a Router's is.
		func(tick time.Time) (json.RawMessage, error) {
			var v T
			if payload != nil {
				v = payload(tick)
			}
			raw, err := encode(leaserouter.TickID(name, tick), v)
			return json.RawMessage(raw), err
		})
}

// RemovePeriodic stops scheduling, in this process, the periodic job
// named name that this Kind added, on every queue it added it to, as
// Router.RemovePeriodic does: other processes that added it go on, a
// tick whose try is in progress may still be enqueued, and the name may
// be added again. A periodic job of another Kind is not this Kind's to
// remove: it goes on. It returns an error wrapping
// leaserouter.ErrNotFound when this Kind has no periodic job named name
// in this process (never added, removed already, or its AddPeriodic has
// not returned), leaserouter.ErrClosed once Stop has closed the Kind's
// queues, and an error wrapping ErrInvalidOptions for a nil Kind (or one
// not made by Register). It does not talk to the database. Safe for
// concurrent use.
func (k *Kind[T]) RemovePeriodic(name string) error {
	if k == nil || k.c == nil {
		return fmt.Errorf("%w: a Kind not made by Register", leaserouter.ErrInvalidOptions)
	}
	// Names are per queue, and WithQueue may have put the periodic job
	// on any queue: each queue's Router removes it if it is this Kind's.
	removed, closed := false, false
	for _, qn := range k.c.names {
		switch err := k.c.queues[qn].r.removePeriodic(name, k.name); {
		case err == nil:
			removed = true
		case errors.Is(err, leaserouter.ErrClosed):
			closed = true
		}
	}
	switch {
	case removed:
		return nil
	case closed:
		return leaserouter.ErrClosed
	}
	return fmt.Errorf("%w: periodic job %s of kind %s", leaserouter.ErrNotFound, contract.Quote(name), contract.Quote(k.name))
}
