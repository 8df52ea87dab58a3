package leaserouter

// Periodic jobs of a Client's Kind: AddPeriodic and RemovePeriodic. They
// are the periodic jobs of the Kind's queue's Router (periodic.go), whose
// scheduler, dedup of tick IDs and Close they use as they are; the Kind
// only wraps the payload (a kindCell, as Kind.Enqueue makes) and gives
// the ticks' jobs its kind.

import (
	"errors"
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// AddPeriodic starts enqueuing p's job, a job of this kind, at each tick
// of p.Schedule, from now on, as Router.AddPeriodic does on the kind's
// queue (or the queue a WithQueue among p.Options names): the job of the
// tick t has ID TickID(p.Name, t), payload p.Payload(t) (the zero T if
// Payload is nil), the options p.Options and the tick as its run-at, and
// runs the kind's handler. The ticks, the rule for a late or paused
// scheduler, and the reports of a Payload or Schedule.Next that panics
// are Router.AddPeriodic's; the ticks are enqueued by the queue's own
// scheduler goroutine, stopped and waited for by Stop.
//
// AddPeriodic may be called before Start: the ticks' jobs wait in the
// queue, as jobs enqueued before Start do, and run once the Client
// starts. A periodic job's Name is unique within its queue: the queue's
// Kinds share its names.
//
// It returns an error wrapping ErrInvalidOptions, and adds nothing, for a
// p Router.AddPeriodic refuses (an empty Name or one that breaks the rule
// for IDs with the tick's room taken, a nil Schedule, an Every(d) with d
// <= 0, an option Enqueue would refuse, WithRunAt or WithDelay among
// Options, a negative Retention of the queue), with the same message; for
// a WithQueue naming a queue the Client does not have; and for a Name
// already added on the queue, by this Kind or another (and not removed).
// It returns ErrClosed once Stop has closed the queue. A nil Kind (or one
// not made by Register) returns an error wrapping ErrInvalidOptions. It
// does not block beyond short locks. Safe for concurrent use; p.Options
// is copied.
func (k *Kind[T]) AddPeriodic(p Periodic[T]) error {
	if err := k.check(); err != nil {
		return err
	}
	queue := contract.QueueOf(p.Options, k.queue)
	q := k.c.queues[queue]
	if q == nil {
		return contract.UnknownPeriodicQueue(ErrInvalidOptions, p.Name, queue)
	}
	payload := p.Payload
	return q.r.addPeriodic(Periodic[any]{
		Name:     p.Name,
		Schedule: p.Schedule,
		// The job's payload as Kind.Enqueue makes it. A panic of the
		// user's Payload goes through, recovered and reported by the
		// scheduler as a Router's is.
		Payload: func(tick time.Time) any {
			cell := new(kindCell[T])
			if payload != nil {
				cell.payload = payload(tick)
			}
			return cell
		},
		Options: p.Options,
	}, k.index)
}

// RemovePeriodic stops the periodic job named name that this Kind added,
// on every queue it added it to, as Router.RemovePeriodic does: no tick
// after the call gets a job (a tick being handled as it is called may
// still get its job), jobs already enqueued stay, and the name may be
// added again. A periodic job of another Kind is not this Kind's to
// remove: it goes on. It returns an error wrapping ErrNotFound when this
// Kind has no periodic job named name (never added, or removed already),
// ErrClosed once Stop has closed the Kind's queues, and an error wrapping
// ErrInvalidOptions for a nil Kind (or one not made by Register). It does
// not block beyond short locks, nor wait for a Payload or Schedule.Next
// in progress. Safe for concurrent use.
func (k *Kind[T]) RemovePeriodic(name string) error {
	if err := k.check(); err != nil {
		return err
	}
	// Names are per queue, and WithQueue may have put the periodic job
	// on any queue: each queue's Router removes it if it is this Kind's.
	removed, closed := false, false
	for _, qn := range k.c.names {
		switch err := k.c.queues[qn].r.removePeriodic(name, k.index); {
		case err == nil:
			removed = true
		case errors.Is(err, ErrClosed):
			closed = true
		}
	}
	switch {
	case removed:
		return nil
	case closed:
		return ErrClosed
	}
	return fmt.Errorf("%w: periodic job %s of kind %s", ErrNotFound, contract.Quote(name), contract.Quote(k.name))
}
