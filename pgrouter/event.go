package pgrouter

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/delivery"
	"github.com/leaserouter/leaserouter/internal/goid"
)

// The event backlog's bound is the contract's (contract.EventBacklog,
// BacklogFull, BacklogDrained): Enqueue, EnqueueMany and claims wait,
// before their round trip, while the backlog is full, until delivery has
// brought it down to half; lease operations never wait. Undelivered
// events count until their hooks have returned, including the batch in
// delivery.

// events delivers a Router's events to Options.OnEvent and Options.Logger
// from a goroutine of its own, in the order this process recorded them,
// never on the goroutine that made the transition.
type events struct {
	onEvent func(leaserouter.Event)
	logger  *slog.Logger
	panics  func() // counts a recovered hook panic

	deliverer atomic.Uint64   // the delivery goroutine's ID (internal/goid)
	group     *sync.WaitGroup // the Router's stopped, where its delivery goroutines run
	stopOnce  sync.Once
	cur       cursor // the delivery goroutine's own (one at a time: the next starts as the last ends)

	mu        sync.Mutex
	producers int // the Router's goroutines that may still add events (see producerDone)
	queue     []leaserouter.Event
	inflight  int           // events of the batch in delivery not yet delivered (counted by progressEvery)
	room      delivery.Room // the producers that found the backlog full
	kick      chan struct{} // cap 1: events are waiting
	stop      chan struct{} // closed by Close: deliver what is left and end
	ended     chan struct{} // closed when the delivery goroutine has ended
}

// newEvents returns nil when no hook is set: recording is then free.
// Otherwise it starts the delivery goroutine in group (its owner's
// WaitGroup, as every delivery goroutine after it), which the owner ends
// with close once each of its producers goroutines (which may add events
// until they end) has called producerDone.
func newEvents(onEvent func(leaserouter.Event), logger *slog.Logger, panics func(), producers int, group *sync.WaitGroup) *events {
	if onEvent == nil && logger == nil {
		return nil
	}
	e := &events{onEvent: onEvent, logger: logger, panics: panics, producers: producers, group: group,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), ended: make(chan struct{})}
	group.Go(e.deliver)
	return e
}

// producerDone tells delivery that one of the Router's goroutines has
// ended: once all have and close was called, what is left is the last.
func (e *events) producerDone() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.producers--
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// add records events, in order. After delivery has ended (Close), there
// is nobody to deliver to: they are dropped.
func (e *events) add(evs ...leaserouter.Event) {
	if e == nil || len(evs) == 0 {
		return
	}
	select {
	case <-e.ended:
		return
	default:
	}
	e.mu.Lock()
	e.queue = append(e.queue, evs...)
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// awaitRoom waits while the backlog is full (delivery.Room: decided by
// the backlog this call finds), or until ctx is done (ctx.Err()) or Close
// begins (nil: the round trip that follows says ErrClosed). A call from a
// hook (the delivery goroutine) never waits: it would wait for itself.
func (e *events) awaitRoom(ctx context.Context) error {
	if e == nil {
		return nil
	}
	for {
		e.mu.Lock()
		if !delivery.Full(len(e.queue) + e.inflight) {
			e.mu.Unlock()
			return nil
		}
		room := e.room.Wait()
		e.mu.Unlock()
		if e.inHook() {
			return nil
		}
		select {
		case <-room: // down to half: look again, another producer may have filled it
		case <-e.stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// inHook reports whether the caller is the delivery goroutine (a hook
// calling back into the Router). About a microsecond: slow paths only.
func (e *events) inHook() bool { return goid.Current() == e.deliverer.Load() }

// deliver is the delivery goroutine, one of the Router's (in its stopped
// WaitGroup, group): it ends once close was called, every producer has
// ended and every event has been delivered. A hook that calls
// runtime.Goexit (t.FailNow in a test's OnEvent, say) ends it:
// resumeAfterGoexit then counts and reports that as a panic of the hook
// and starts a delivery goroutine in the same group that goes on from the
// same place, as the core's does, so no event is lost or stuck and Close
// still finds a goroutine to wait for.
func (e *events) deliver() {
	e.deliverer.Store(goid.Current())
	goexit := true // until the loop returns
	defer func() {
		if goexit {
			e.resumeAfterGoexit()
			return
		}
		close(e.ended)
	}()
	if msg := e.cur.report; msg != "" { // left by a delivery goroutine a hook ended
		e.cur.report = ""
		e.reportFrom(msg, e.cur.reportJob)
	}
	for {
		if e.cur.batch == nil {
			e.mu.Lock()
			batch := e.queue
			e.queue = nil
			e.inflight = len(batch)
			e.progressed(0)
			e.mu.Unlock()
			e.cur = cursor{batch: batch}
		}
		c := &e.cur
		for c.at < len(c.batch) {
			e.callFrom(c.batch[c.at])
			c.at, c.stage = c.at+1, stageOnEvent
			if c.at-c.counted >= progressEvery || c.at == len(c.batch) {
				e.mu.Lock()
				e.progressed(c.at - c.counted)
				e.mu.Unlock()
				c.counted = c.at
			}
		}
		n := len(c.batch)
		e.cur = cursor{}
		if n > 0 {
			continue
		}
		select {
		case <-e.stop:
			e.mu.Lock()
			left, running := len(e.queue), e.producers
			e.mu.Unlock()
			if left == 0 && running == 0 {
				goexit = false
				return
			}
			if left == 0 {
				<-e.kick // a producer's last events, or its end
			}
		default:
			select {
			case <-e.kick:
			case <-e.stop:
			}
		}
	}
}

// cursor is the delivery goroutine's place in its batch, kept on events
// so that a delivery goroutine started after a hook's runtime.Goexit goes
// on from there.
type cursor struct {
	batch     []leaserouter.Event
	at        int    // the event being delivered
	counted   int    // events of batch counted as delivered (progressed)
	stage     int    // what of batch[at] is next: stageOnEvent, stageLogger, stageDone
	reporting bool   // in reportFrom: a Goexit now is the Logger's, and the cursor is already past it
	report    string // a report for the next delivery goroutine to log
	reportJob string
}

// The stages of one event's delivery.
const (
	stageOnEvent = iota
	stageLogger
	stageDone
)

// callFrom delivers ev from the cursor's stage on: to OnEvent, then to the
// Logger, each panic recovered, counted and reported (contract.Report: through the Logger, or slog.Default() when there
// is none or it panics too); a report entry (kindReport) is logged the
// same way. The stage moves on before each report, so a Goexit in the
// Logger while reporting skips only the report.
func (e *events) callFrom(ev leaserouter.Event) {
	c := &e.cur
	if ev.Kind == kindReport {
		if c.stage == stageOnEvent {
			c.stage = stageDone
			e.reportFrom(ev.Err.Error(), ev.JobID)
		}
		return
	}
	if c.stage == stageOnEvent {
		if e.onEvent != nil {
			if p := contract.Recovered(func() { e.onEvent(ev) }); p != nil {
				e.panics()
				c.stage = stageLogger
				e.reportFrom(contract.HookPanicked(contract.HookOnEvent, ev.Kind, p), ev.JobID)
			}
		}
		c.stage = stageLogger
	}
	if c.stage == stageLogger {
		if e.logger != nil {
			if p := contract.Recovered(func() { ev.Log(e.logger) }); p != nil {
				e.panics()
				// Not through the Logger that just panicked.
				contract.ReportTo(slog.Default(), contract.HookPanicked(contract.HookLogger, ev.Kind, p), ev.JobID)
			}
		}
		c.stage = stageDone
	}
}

// reportFrom reports msg (contract.Report) from the delivery goroutine,
// counting a panic of the Logger as one more.
func (e *events) reportFrom(msg, jobID string) {
	e.cur.reporting = true
	if contract.Report(e.logger, msg, jobID) {
		e.panics()
	}
	e.cur.reporting = false
}

// resumeAfterGoexit runs as the delivery goroutine ends because a hook
// called runtime.Goexit: it counts that as a panic of the hook, steps past
// it as callFrom steps past a panic (the Logger still gets the event
// whose OnEvent ended the goroutine), leaves the report for the next
// goroutine, and starts it.
func (e *events) resumeAfterGoexit() {
	e.panics()
	c := &e.cur
	switch {
	case c.reporting: // the Logger ended a report: the cursor is already past it
		c.reporting = false
	case c.stage == stageOnEvent:
		ev := c.batch[c.at]
		c.stage, c.report, c.reportJob = stageLogger, contract.HookGoexit(contract.HookOnEvent, ev.Kind), ev.JobID
	case c.stage == stageLogger:
		ev := c.batch[c.at]
		c.stage, c.report, c.reportJob = stageDone, contract.HookGoexit(contract.HookLogger, ev.Kind), ev.JobID
	}
	e.group.Go(e.deliver) // this goroutine is still counted in group: Add is safe
}

// progressEvery is how many events the delivery goroutine delivers between
// updates of the backlog, on every backend.
const progressEvery = contract.ProgressEvery

// progressed counts n events of the batch in delivery as delivered and
// opens room once the backlog is down to half. The caller holds e.mu.
func (e *events) progressed(n int) {
	e.inflight -= n
	e.room.Progressed(len(e.queue) + e.inflight)
}

// kindReport marks an entry of the queue that is not an event but the
// report of a recovered panic of a user callback (Backoff), its message in
// Err, for the delivery goroutine to log: the lease
// operation that found it never pays for the Logger.
const kindReport leaserouter.EventKind = 0

// report queues msg, the report of a user callback's recovered panic
// concerning job jobID, for the delivery goroutine, and reports whether
// it did: false with no delivery goroutine (no hook set, or after Close),
// when the caller reports to slog.Default() itself. The caller has
// counted the panic.
func (e *events) report(msg, jobID string) bool {
	if e == nil {
		return false
	}
	select {
	case <-e.ended:
		return false
	default:
	}
	e.add(leaserouter.Event{Kind: kindReport, JobID: jobID, Err: errors.New(msg)})
	return true
}

// close delivers what is left and ends the delivery goroutine, waiting
// until it has or ctx is done; called from a hook, it does not wait for
// the delivery it is part of (what is left is delivered once the hook
// returns).
func (e *events) close(ctx context.Context) error {
	if e == nil {
		return nil
	}
	e.stopOnce.Do(func() { close(e.stop) })
	if e.inHook() {
		return nil
	}
	select {
	case <-e.ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// emit records evs: counted for History, and delivered to the hooks (if
// any).
func (r *Router[T]) emit(evs ...leaserouter.Event) {
	r.hist.tally(evs)
	r.ev.add(evs...)
}

// heldFor is Event.Held of a lease granted at granted (the row's
// leased_at; nil for a lease granted before schema version 4) and ended
// at end: how long it was held, 0 if unknown.
func heldFor(granted *time.Time, end time.Time) time.Duration {
	if granted == nil {
		return 0
	}
	return max(0, end.Sub(*granted))
}
