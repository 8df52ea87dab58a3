package pgrouter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/goid"
)

// eventBacklog bounds the events waiting for delivery that new work may
// add, as in the core: Enqueue, EnqueueMany and claims wait, before their
// round trip, while this many wait, until delivery has brought the backlog
// down to half; lease operations never wait.
const eventBacklog = 4096

// events delivers a Router's events to Options.OnEvent and Options.Logger
// from a goroutine of its own, in the order this process recorded them,
// never on the goroutine that made the transition.
type events struct {
	onEvent func(leaserouter.Event)
	logger  *slog.Logger
	panics  func() // counts a recovered hook panic

	deliverer atomic.Uint64 // the delivery goroutine's ID (internal/goid)
	stopOnce  sync.Once

	mu        sync.Mutex
	producers int // the Router's goroutines that may still add events (see producerDone)
	queue     []leaserouter.Event
	room      chan struct{} // closed when the backlog falls to half; replaced when it fills
	kick      chan struct{} // cap 1: events are waiting
	stop      chan struct{} // closed by Close: deliver what is left and end
	ended     chan struct{} // closed when the delivery goroutine has ended
}

// newEvents returns nil when no hook is set: recording is then free. Its
// owner runs deliver as one of its goroutines, and ends it with close,
// once each of its producers goroutines (which may add events until they
// end) has called producerDone.
func newEvents(onEvent func(leaserouter.Event), logger *slog.Logger, panics func(), producers int) *events {
	if onEvent == nil && logger == nil {
		return nil
	}
	e := &events{onEvent: onEvent, logger: logger, panics: panics, producers: producers, room: make(chan struct{}),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), ended: make(chan struct{})}
	close(e.room)
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
	if len(e.queue) >= eventBacklog {
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

// deliver is the delivery goroutine, one of the Router's (in its stopped
// WaitGroup): it ends once close was called, every producer has ended and
// every event has been delivered.
func (e *events) deliver() {
	e.deliverer.Store(goid.Current())
	defer close(e.ended)
	for {
		e.mu.Lock()
		batch := e.queue
		e.queue = nil
		select {
		case <-e.room:
		default:
			close(e.room) // empty now
		}
		e.mu.Unlock()
		for _, ev := range batch {
			e.call(ev)
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-e.stop:
			e.mu.Lock()
			left, running := len(e.queue), e.producers
			e.mu.Unlock()
			if left == 0 && running == 0 {
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

// call delivers one event to each hook, a panic recovered, counted and
// reported to slog.Default().
func (e *events) call(ev leaserouter.Event) {
	if e.onEvent != nil {
		e.recovered("OnEvent", ev, func() { e.onEvent(ev) })
	}
	if e.logger != nil {
		e.recovered("Logger", ev, func() { ev.Log(e.logger) })
	}
}

func (e *events) recovered(hook string, ev leaserouter.Event, f func()) {
	defer func() {
		if p := recover(); p != nil {
			e.panics()
			slog.Default().Error(fmt.Sprintf("pgrouter: %s panicked on %s: %v", hook, ev.Kind, p), "job_id", ev.JobID)
		}
	}()
	f()
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
