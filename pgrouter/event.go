package pgrouter

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/goid"
)

// eventBacklog bounds the events waiting for delivery that new work may
// add, as in the core: Enqueue, EnqueueMany and claims wait, before their
// round trip, while this many wait, until delivery has brought the backlog
// down to half; lease operations never wait. Undelivered events count
// until their hooks have returned, including the batch in delivery. The
// bound is the contract's, the same on every backend.
const eventBacklog = contract.EventBacklog

// events delivers a Router's events to Options.OnEvent and Options.Logger
// from a goroutine of its own, in the order this process recorded them,
// never on the goroutine that made the transition.
type events struct {
	onEvent func(leaserouter.Event)
	logger  *slog.Logger
	panics  func() // counts a recovered hook panic

	deliverer atomic.Uint64 // the delivery goroutine's ID (internal/goid)
	stopOnce  sync.Once

	mu       sync.Mutex
	queue    []leaserouter.Event
	inflight int           // events of the batch in delivery not yet delivered (counted by progressEvery)
	room     chan struct{} // closed when the backlog falls to half; replaced when it fills
	kick     chan struct{} // cap 1: events are waiting
	stop     chan struct{} // closed by Close: deliver what is left and end
	ended    chan struct{} // closed when the delivery goroutine has ended
}

// newEvents returns nil when no hook is set: recording is then free.
func newEvents(onEvent func(leaserouter.Event), logger *slog.Logger, panics func()) *events {
	if onEvent == nil && logger == nil {
		return nil
	}
	e := &events{onEvent: onEvent, logger: logger, panics: panics, room: make(chan struct{}),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), ended: make(chan struct{})}
	close(e.room)
	go e.deliver()
	return e
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
	if len(e.queue)+e.inflight >= eventBacklog {
		select {
		case <-e.room:
			e.room = make(chan struct{})
		default:
		}
	}
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// awaitRoom waits while the backlog is full, or until ctx is done. A
// call from a hook (the delivery goroutine) never waits: it would wait
// for itself.
func (e *events) awaitRoom(ctx context.Context) error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	room := e.room
	e.mu.Unlock()
	select {
	case <-room:
		return nil
	default:
	}
	if e.inHook() {
		return nil
	}
	select {
	case <-room:
		return nil
	case <-e.stop:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// inHook reports whether the caller is the delivery goroutine (a hook
// calling back into the Router). About a microsecond: slow paths only.
func (e *events) inHook() bool { return goid.Current() == e.deliverer.Load() }

// deliver is the delivery goroutine.
func (e *events) deliver() {
	e.deliverer.Store(goid.Current())
	defer close(e.ended)
	for {
		e.mu.Lock()
		batch := e.queue
		e.queue = nil
		e.inflight = len(batch)
		e.progressed(0)
		e.mu.Unlock()
		for i, ev := range batch {
			e.call(ev)
			if (i+1)%progressEvery == 0 || i == len(batch)-1 {
				e.mu.Lock()
				e.progressed(min(progressEvery, e.inflight))
				e.mu.Unlock()
			}
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-e.kick:
		case <-e.stop:
			e.mu.Lock()
			left := len(e.queue)
			e.mu.Unlock()
			if left == 0 {
				return
			}
		}
	}
}

// progressEvery is how many events the delivery goroutine delivers between
// updates of the backlog, as in the core.
const progressEvery = 256

// progressed counts n events of the batch in delivery as delivered and
// opens room once the backlog is down to half. The caller holds e.mu.
func (e *events) progressed(n int) {
	e.inflight -= n
	if len(e.queue)+e.inflight > eventBacklog/2 {
		return
	}
	select {
	case <-e.room:
	default:
		close(e.room)
	}
}

// kindReport marks an entry of the queue that is not an event but the
// report of a recovered panic of a user callback (Backoff), its message in
// Err, for the delivery goroutine to log, as in the core: the lease
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

// call delivers one event to each hook, a panic recovered, counted and
// reported as the core reports it (contract.Report: through the Logger,
// or slog.Default() when there is none or it panics too). A report
// entry (kindReport) is logged the same way.
func (e *events) call(ev leaserouter.Event) {
	if ev.Kind == kindReport {
		if contract.Report(e.logger, ev.Err.Error(), ev.JobID) {
			e.panics()
		}
		return
	}
	if e.onEvent != nil {
		if p := contract.Recovered(func() { e.onEvent(ev) }); p != nil {
			e.panics()
			if contract.Report(e.logger, contract.HookPanicked(contract.HookOnEvent, ev.Kind, p), ev.JobID) {
				e.panics()
			}
		}
	}
	if e.logger != nil {
		if p := contract.Recovered(func() { ev.Log(e.logger) }); p != nil {
			e.panics()
			// Not through the Logger that just panicked.
			contract.ReportTo(slog.Default(), contract.HookPanicked(contract.HookLogger, ev.Kind, p), ev.JobID)
		}
	}
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
