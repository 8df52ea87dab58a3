package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/delivery"
	"github.com/leaserouter/leaserouter/internal/goid"
)

// Event delivery. SAME RULE on every backend, written once: the backlog's
// bound and the producers' wait for room (contract.EventBacklog,
// BacklogFull, BacklogDrained; delivery.Room: Enqueue, EnqueueMany and
// claims wait, before their round trip, when they find the backlog full,
// until delivery has brought it down to half; lease operations never
// wait), the report texts (internal/contract/event.go), and the stepping
// through OnEvent and the Logger with its panic and Goexit recovery and
// progress cadence (delivery.Deliver, delivery.Exited). TUNED to this
// backend: events arrive milliseconds apart, each after a round trip, so
// they go into a plain queue under e.mu with a kick channel, the delivery
// goroutine takes the whole queue as its batch, counts its progress under
// e.mu and a hook's panic at once (Stats under r.mu), and the goroutine
// after a Goexit runs in the Router's WaitGroup. Undelivered events count
// until their hooks have returned, including the batch in delivery.

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
	batch     []leaserouter.Event // the batch in delivery, and the place in it: the delivery goroutine's own
	cur       delivery.Cursor     // (one at a time: the next starts as the last ends, and goes on from there)

	mu        sync.Mutex
	producers int // the Router's goroutines that may still add events (see producerDone)
	queue     []leaserouter.Event
	inflight  int           // events of the batch in delivery not yet counted as delivered (hooks.Progress)
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
// ended and every event has been delivered. It steps through each batch
// with delivery.Deliver; a hook that calls runtime.Goexit (t.FailNow in a
// test's OnEvent, say) ends it, and its deferred function steps past that
// (delivery.Exited) and starts a delivery goroutine in the same group that
// goes on from the same place, so no event is lost or stuck and Close
// still finds a goroutine to wait for.
func (e *events) deliver() {
	e.deliverer.Store(goid.Current())
	goexit := true // until the loop returns
	defer func() {
		if goexit {
			delivery.Exited(&e.cur, e.batch, hooks{e})
			e.group.Go(e.deliver) // this goroutine is still counted in group: Go is safe
			return
		}
		close(e.ended)
	}()
	for {
		if e.batch == nil {
			e.mu.Lock()
			batch := e.queue
			e.queue = nil
			e.inflight = len(batch)
			e.progressed(0)
			e.mu.Unlock()
			e.batch, e.cur = batch, delivery.Cursor{}
		}
		n := len(e.batch)
		if n > 0 {
			delivery.Deliver(&e.cur, e.batch, hooks{e})
			e.batch = nil
			continue
		}
		e.batch = nil
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

// hooks is the delivery goroutine's side of delivery.Deliver: the
// Router's hooks, and its progress counted under e.mu.
type hooks struct{ e *events }

// IsReport reports whether ev is a report entry (contract.KindReport),
// logged through the Logger, not an event.
func (h hooks) IsReport(ev *leaserouter.Event) bool { return ev.Kind == contract.KindReport }

// Report returns a report entry's message and job.
func (h hooks) Report(ev *leaserouter.Event) (msg, jobID string) { return ev.Err.Error(), ev.JobID }

// Kind returns ev's kind (named in reports) and job.
func (h hooks) Kind(ev *leaserouter.Event) (fmt.Stringer, string) { return ev.Kind, ev.JobID }

// Deliver gives ev to OnEvent (unless OnEvent already had it:
// c.OnEventDue), then to the Logger, telling c when the Logger's turn
// begins (c.LoggerNext), so that a panic is blamed on the hook that
// raised it. User code; no lock held.
func (h hooks) Deliver(ev *leaserouter.Event, c *delivery.Cursor) {
	if h.e.onEvent != nil && c.OnEventDue() {
		h.e.onEvent(*ev)
	}
	c.LoggerNext()
	if h.e.logger != nil {
		ev.Log(h.e.logger)
	}
}

// Logger is Options.Logger, for reports; nil if unset.
func (h hooks) Logger() *slog.Logger { return h.e.logger }

// Panicked counts the panic at once (it takes the Router's r.mu): Stats
// shows it by the time the report is logged.
func (h hooks) Panicked() { h.e.panics() }

// Progress counts the entries delivered since its last call, under
// e.mu, and lets waiting producers go on once the backlog is down to
// half.
func (h hooks) Progress(c *delivery.Cursor) {
	h.e.mu.Lock()
	h.e.progressed(c.Delivered())
	h.e.mu.Unlock()
}

// progressed counts n events of the batch in delivery as delivered and
// lets the producers waiting for room go on once the backlog is down to
// half. The caller holds e.mu.
func (e *events) progressed(n int) {
	e.inflight -= n
	e.room.Progressed(len(e.queue) + e.inflight)
}

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
	e.add(leaserouter.Event{Kind: contract.KindReport, JobID: jobID, Err: errors.New(msg)})
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
	for i := range evs {
		evs[i].Queue = r.opts.Queue
	}
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
