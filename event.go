package leaserouter

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// EventKind names a transition of a job. Its String is the event's log
// message ("lease_acquired", ...).
type EventKind uint8

// The kinds of event, one per transition.
const (
	EventEnqueued       EventKind = iota + 1 // a job was accepted by Enqueue
	EventDuplicate                           // Enqueue refused a known ID (Err is ErrDuplicate)
	EventLeaseAcquired                       // a lease was granted: Token, WorkerID, Attempt
	EventLeaseExtended                       // a heartbeat extended a lease
	EventLeaseExpired                        // a lease expired; Time is its expiry instant
	EventCompleted                           // the job succeeded
	EventFailed                              // the holder called Fail; Err is the cause
	EventRetryScheduled                      // a failed job will be retried after its backoff
	EventDead                                // the job reached StateFailed; Err is its last error
	EventStaleRejected                       // an operation on a lost lease was refused; Token is the lease's
	EventReleased                            // the holder (or Close) handed the lease back
	EventCanceled                            // the job was canceled
	EventPurged                              // a finished job was dropped (retention over)
	numEventKinds
)

var eventNames = [numEventKinds]string{
	"", "enqueued", "duplicate", "lease_acquired", "lease_extended", "lease_expired",
	"completed", "failed", "retry_scheduled", "dead", "stale_rejected", "released",
	"canceled", "purged",
}

// String returns the kind's log message, such as "lease_acquired", or
// "EventKind(n)" for a value outside the constants.
func (k EventKind) String() string {
	if k > 0 && k < numEventKinds {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one transition of one job, delivered to Options.OnEvent and
// Options.Logger in the order the transitions happened.
type Event struct {
	Kind     EventKind
	Time     time.Time // when the transition took effect (for lease_expired, the expiry instant)
	JobID    string
	WorkerID string // the lease holder concerned, if any
	Token    Token  // the lease concerned, if any (for stale_rejected, the refused one)
	Attempt  int    // the job's attempt count at the transition (for stale_rejected, the refused lease's attempt)
	Err      error  // the cause, for duplicate, failed, dead, stale_rejected and released by Close

	// Durations the transition closes, for histograms; zero where they do
	// not apply. Measured on the router's monotonic clock.

	// Wait, on lease_acquired: how long the job was ready before this
	// lease — since its enqueue, its run-at, its release, or the expiry of
	// its previous lease.
	Wait time.Duration
	// Requeued, on lease_acquired: the job was ready again because its
	// previous lease expired, so Wait is the time from that expiry to this
	// lease (how long a crashed worker's job waited).
	Requeued bool
	// Held, on completed, failed, released, lease_expired and canceled (of
	// a leased job): how long the lease was held, from its grant to the
	// transition (for lease_expired, to the expiry instant). On completed
	// and failed it is the job's run time.
	Held time.Duration
}

// setHeld records on the last event how long the lease granted at
// "granted" was held until "at". The caller holds r.mu and has just
// emitted the event.
func (r *Router[T]) setHeld(granted, at int64) {
	if r.hooked {
		r.outbox[len(r.outbox)-1].Held = time.Duration(at - granted)
	}
}

// emit records an event for delivery after the lock is released. The
// caller holds r.mu. With no hook configured it costs one branch.
func (r *Router[T]) emit(kind EventKind, at int64, j *job[T], worker string, tok Token, err error) {
	if !r.hooked {
		return
	}
	r.outbox = append(r.outbox, Event{
		Kind: kind, Time: r.timeAt(at), JobID: j.id, WorkerID: worker,
		Token: tok, Attempt: int(j.attempt), Err: err,
	})
}

// unlock releases r.mu and delivers the events recorded so far, in order.
// Only one goroutine delivers at a time (the first to find events waiting);
// the others leave their events to it, so delivery order is the order of the
// transitions, and an OnEvent that calls back into the Router appends to the
// queue its own goroutine is draining instead of deadlocking.
func (r *Router[T]) unlock() {
	if r.delivering || len(r.outbox) == 0 {
		r.mu.Unlock()
		return
	}
	r.delivering = true
	for len(r.outbox) > 0 {
		batch := r.outbox
		r.outbox = r.spare[:0]
		r.mu.Unlock()
		r.deliver(batch)
		clear(batch) // drop references to errors and IDs
		r.mu.Lock()
		r.spare = batch[:0]
	}
	r.delivering = false
	r.idle.Broadcast()
	r.mu.Unlock()
}

func (r *Router[T]) deliver(batch []Event) {
	for i := range batch {
		r.deliverOne(&batch[i])
	}
}

// deliverOne calls the hooks for one event. A panic in OnEvent is recovered
// and logged, so one bad hook cannot leave the queue half-delivered.
func (r *Router[T]) deliverOne(e *Event) {
	if r.opts.OnEvent != nil {
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.log().Error("leaserouter: OnEvent panicked", "event", e.Kind.String(), "job_id", e.JobID, "panic", fmt.Sprint(p))
				}
			}()
			r.opts.OnEvent(*e)
		}()
	}
	if r.opts.Logger != nil {
		logEvent(r.opts.Logger, e)
	}
}

func (r *Router[T]) log() *slog.Logger {
	if r.opts.Logger != nil {
		return r.opts.Logger
	}
	return slog.Default()
}

// logEvent writes one record per event with stable keys: event, job_id,
// token, attempt, worker_id and err. Expiries, stale rejections and dead
// jobs are warnings; the rest is info.
func logEvent(l *slog.Logger, e *Event) {
	level := slog.LevelInfo
	switch e.Kind {
	case EventLeaseExpired, EventStaleRejected, EventDead:
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	// A Record of our own, rather than l.LogAttrs, so the record's time is
	// the instant of the transition, not the instant of delivery.
	rec := slog.NewRecord(e.Time, level, e.Kind.String(), 0)
	rec.AddAttrs(
		slog.String("event", e.Kind.String()),
		slog.String("job_id", e.JobID),
		slog.Uint64("token", uint64(e.Token)),
		slog.Int("attempt", e.Attempt),
		slog.String("worker_id", e.WorkerID))
	if e.Err != nil {
		rec.AddAttrs(slog.String("err", e.Err.Error()))
	}
	_ = l.Handler().Handle(ctx, rec) // a handler's write error has nowhere better to go
}
