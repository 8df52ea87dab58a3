package leaserouter

// Events: their kinds, what an Event carries, and how one is logged, the
// same on every backend (pgrouter delivers these types; a report entry's
// kind is contract.KindReport). TUNED to this backend: the record an
// operation writes into the outbox under r.mu (small, times as
// router-clock integers) and turned into an Event only by the delivery
// goroutine (delivery.go), off the lock.

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
	EventFailed                              // one failed attempt (Lease.Fail, or a Run handler's error or panic), not a dead job (StateDead, Stats.DeadJobs: no attempts left, or a Permanent error), which EventDead announces; Err is the attempt's cause
	EventRetryScheduled                      // a failed job will be retried after its backoff
	EventDead                                // the job is dead: it reached StateDead (Stats.DeadJobs, Stats.Dead); Err is its last error
	EventStaleRejected                       // an operation on a lost lease was refused; Token is the lease's
	EventReleased                            // the holder (or Close, or Run for a job it had not started) handed the lease back
	EventCanceled                            // the job was canceled
	EventPurged                              // a job was dropped: finished and its retention over, or removed by Router.Delete
	EventRetried                             // a finished job was made pending again by Router.Retry, with a fresh attempt budget
	EventSnoozed                             // the holder snoozed the job (Lease.Snooze, or a Run handler's Snooze error): scheduled again, the attempt not counted
	numEventKinds
)

var eventNames = [numEventKinds]string{
	"", "enqueued", "duplicate", "lease_acquired", "lease_extended", "lease_expired",
	"completed", "failed", "retry_scheduled", "dead", "stale_rejected", "released",
	"canceled", "purged", "retried", "snoozed",
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
	// Queue is the queue the job is in: DefaultQueue for a Router's
	// events, the queue's name for a Client's.
	Queue string
	// JobKind is the job's kind, as a Client registered it; "" for a
	// Router's jobs.
	JobKind string

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
	// Held, on completed, failed, released, snoozed, lease_expired and
	// canceled (of a leased job): how long the lease was held, from its grant to the
	// transition (for lease_expired, to the expiry instant). On completed
	// and failed it is the job's run time.
	Held time.Duration
}

// record is an event as the outbox holds it: smaller than an Event, with
// times as router-clock integers, so emitting one under the lock builds no
// time.Time. The delivery goroutine turns it into an Event.
type record struct {
	jobID    string
	workerID string
	err      error
	at       int64 // the transition's instant on the router's clock
	token    Token
	dur      int64 // Event.Wait on lease_acquired, Event.Held on the events ending a lease
	attempt  int32
	kind     EventKind
	requeued bool
	jobKind  uint16 // the job's kind (job.kind)
}

// event is rec as delivered.
func (r *Router[T]) event(rec *record) Event {
	e := Event{
		Kind: rec.kind, Time: r.timeAt(rec.at), JobID: rec.jobID, WorkerID: rec.workerID,
		Token: rec.token, Attempt: int(rec.attempt), Err: rec.err, Requeued: rec.requeued,
		Queue: r.queue, JobKind: r.kindName(rec.jobKind),
	}
	if rec.kind == EventLeaseAcquired {
		e.Wait = time.Duration(rec.dur)
	} else {
		e.Held = time.Duration(rec.dur)
	}
	return e
}

// emit records an event of job j (and lease l, if one is concerned) for
// the delivery goroutine and returns it, so the caller can fill the
// durations it closes; it returns nil when no hook is configured, at the
// cost of one branch (emit is small enough to be inlined; record is not).
// The caller holds r.mu.
func (r *Router[T]) emit(kind EventKind, at int64, j *job[T], l *Lease[T], tok Token, err error) *record {
	if !r.hooked {
		return nil
	}
	return r.record(kind, at, j, l, tok, err)
}

// record is emit's work when a hook is configured.
func (r *Router[T]) record(kind EventKind, at int64, j *job[T], l *Lease[T], tok Token, err error) *record {
	rec := r.push()
	rec.kind, rec.at, rec.token, rec.attempt, rec.jobID, rec.jobKind = kind, at, tok, j.attempt, j.id, j.kind
	if l != nil {
		rec.workerID = l.WorkerID
	}
	if err != nil {
		rec.err = err
	}
	return rec
}

// push appends a zero record to the outbox and returns it. The slots of
// the outbox beyond its length are always zero (new memory, or cleared by
// the delivery goroutine), so emit writes only the fields it sets.
func (r *Router[T]) push() *record {
	r.pushed++
	n := len(r.outbox)
	if n < cap(r.outbox) {
		r.outbox = r.outbox[:n+1]
	} else {
		r.outbox = append(r.outbox, record{})
	}
	return &r.outbox[n]
}

// setHeld records on rec, if any, how long the lease granted at "granted"
// was held until "at".
func setHeld(rec *record, granted, at int64) {
	if rec != nil {
		rec.dur = at - granted
	}
}

// Log writes e to l as a Router writes each event to Options.Logger: one
// record at e.Time, its message the kind, with the stable keys event,
// job_id, token, attempt, worker_id and err (when Err is set); expiries,
// stale rejections and dead jobs at level Warn, the rest at Info. A nil l
// writes nothing. Every backend's Logger writes its events this way; call
// it to log events from OnEvent (to a second logger, or filtered).
func (e Event) Log(l *slog.Logger) {
	if l != nil {
		logEvent(l, &e)
	}
}

// logEvent is Log, without the copy.
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
