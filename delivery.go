package leaserouter

// Event delivery. SAME RULE on every backend, written once: the stepping
// of the delivery goroutine through OnEvent and the Logger, with its
// panic and Goexit recovery, report entries and progress cadence
// (internal/delivery: Deliver, Exited; the report texts and bounds are
// internal/contract/event.go's). TUNED to this backend: the hand-off of
// the outbox to the delivery goroutine, shaped by r.mu (events are
// emitted under it by every operation, so the goroutine must never queue
// on it nor cost a caller a wake-up per batch: see handoff), the linger
// of a dense stream, the reuse of outbox memory, records turned into
// events only off the lock, and hook panics counted in Stats at progress
// rather than one lock each.

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/delivery"
	"github.com/leaserouter/leaserouter/internal/goid"
)

// idleKeep is the capacity, in events, of the buffers the delivery
// machinery keeps for reuse when it goes idle; larger ones, left by a
// burst, are dropped so that their memory comes back.
const idleKeep = 1024

// unlockAndDeliver releases r.mu, the end of every critical section, and
// sees that the events it emitted get delivered: if the delivery goroutine
// has asked for a batch, the outbox is handed to it (handOff), and woken
// if it sleeps. It never calls a hook itself, so the caller's latency does
// not depend on them.
func (r *Router[T]) unlockAndDeliver() {
	if len(r.outbox) == 0 && len(r.lostNotes) == 0 && r.phase != phaseClosed && r.hooks.Load() == nil {
		// Nothing to hand off, no lease end to tell, no test signal: the
		// common end of a call without hooks, kept apart from the rest so
		// that it costs no more than the unlock.
		r.mu.Unlock()
		return
	}
	r.unlockAndDeliverSlow()
}

// unlockAndDeliverSlow is unlockAndDeliver with something to do besides
// the unlock.
func (r *Router[T]) unlockAndDeliverSlow() {
	wake := (len(r.outbox) > 0 || r.phase == phaseClosed) && r.handOff()
	// The lease ends told under the lock (tell) cancel their contexts
	// once it is released: a few from a copy (the queue keeps its
	// memory), a mass expiry's from the queue itself.
	var few [4]lostNote
	var told []lostNote
	if n := len(r.lostNotes); n > len(few) {
		told, r.lostNotes = r.lostNotes, nil
	} else if n > 0 {
		told = few[:copy(few[:], r.lostNotes)]
		clear(r.lostNotes)
		r.lostNotes = r.lostNotes[:0]
	}
	if h := r.hooks.Load(); h != nil && h.Unlocking != nil {
		h.Unlocking()
	}
	r.mu.Unlock()
	for _, n := range told {
		r.runNote(n)
	}
	if wake {
		select {
		case r.delivery.kick <- struct{}{}:
		default: // a kick it has not taken yet wakes it as well
		}
	}
}

// runNote runs a lease-end note queued under r.mu, after r.mu is
// released. Canceling a context derived from a caller's own context type
// runs that type's Done and Value (the context package unhooks the child
// from its parent): user code, in whichever goroutine ended the lease (a
// holder, Cancel's caller, Close, the reaper). A panic there is recovered,
// counted in Stats.CallbackPanics and reported, and the other notes still
// run.
func (r *Router[T]) runNote(n lostNote) {
	defer func() {
		if p := recover(); p != nil {
			r.reportUserCode(fmt.Sprintf("leaserouter: a context canceled at the end of lease %d panicked: %v", n.cause.Token, p), n.cause.JobID, true)
		}
	}()
	n.w.leaseLost(n.cause)
}

// handoff is the delivery goroutine's side of the hand-off. The
// goroutine asks for a batch by moving state away from deliverBusy; the
// caller that next releases r.mu with events waiting puts them in handed
// and swaps state back to deliverBusy (handOff), and wakes the goroutine
// if it sleeps. So a dense stream of events is handed over without the
// goroutine ever queueing on r.mu and without a wake-up per batch: a
// goroutine asleep on a sync.Mutex or a channel is woken by a system call
// of the goroutine that frees it (measured: tens of microseconds on a
// 2-core virtual machine, most of BenchmarkLifecycleHooked's cost when
// each batch needed one), and that goroutine would be a caller.
type handoff struct {
	state     atomic.Int32    // deliverBusy, deliverWants, deliverLingers or deliverIdle
	inflight  atomic.Int64    // events handed over and not yet delivered
	delivered atomic.Uint64   // events delivered since New (for Flush)
	waiting   atomic.Bool     // a caller waits for progress (r.room or r.flush): the goroutine must look (progressed) and not linger
	goid      atomic.Uint64   // the delivery goroutine's, so a hook calling back is recognised
	handed    []record        // the batch handed over; written before state is swapped to deliverBusy
	returned  []record        // the last batch's memory, for the next outbox; written before state leaves deliverBusy
	batch     []record        // the batch in delivery; nil between batches (the goroutine's own)
	cur       delivery.Cursor // the goroutine's place in batch (its own)
	panics    int             // hook panics not yet counted in Stats (the goroutine's own)
	kick      chan struct{}   // wakes the goroutine asleep in deliverLingers or deliverIdle; cap 1
	done      chan struct{}   // closed when the goroutine ends
}

// The delivery goroutine's states.
const (
	deliverBusy    = iota // delivering, or deciding how to wait: nothing is handed over
	deliverWants          // awake, waiting for the next caller to hand over its events
	deliverLingers        // asleep until linger passes: hand over and wake it only when half the backlog waits
	deliverIdle           // asleep: hand over and wake it at the next event
)

// lingerAbove and linger decide how the delivery goroutine waits once it
// has delivered a batch. After a batch of at least lingerAbove events, a
// sign of a dense stream, it lingers: it sleeps for linger (the OS may
// round it up, to a millisecond on Linux) so that the events of that time
// come in one batch without a wake-up, and callers wake it early only
// when half the backlog waits. After a smaller batch, or from a linger
// that found nothing, it waits idle, woken by the next event, so a sparse
// stream is delivered at once. Under a dense stream an event thus reaches
// the hooks within about a millisecond plus the hooks' own time.
const (
	lingerAbove = 64
	linger      = 500 * time.Microsecond
)

// wantTries bounds how many times the delivery goroutine yields while it
// waits, awake, for a caller to hand over the events of a linger, before it
// takes the lock and looks itself (the stream has paused).
const wantTries = 32

// handOff gives the outbox to the delivery goroutine if it has asked for a
// batch (an empty one once the Router is closed, so that it ends), and
// reports whether the goroutine sleeps and must be woken. The caller holds
// r.mu.
func (r *Router[T]) handOff() (wake bool) {
	d := r.delivery
	if d == nil {
		return false
	}
	switch d.state.Load() {
	case deliverBusy:
		return false
	case deliverLingers:
		if len(r.outbox) < eventBacklog/2 && r.phase != phaseClosed && r.flush == nil {
			return false
		}
	}
	// The batch is in place before the swap publishes it. Only this caller
	// (holding r.mu) moves state to deliverBusy, and only the goroutine
	// moves it away (perhaps from deliverLingers to deliverWants
	// meanwhile): the swap returns the state to act on.
	d.handed = r.takeOutbox()
	return d.state.Swap(deliverBusy) != deliverWants
}

// takeOutbox returns the outbox as a batch for the delivery goroutine,
// counted in flight, and gives the outbox the memory of the last batch.
// The caller holds r.mu.
func (r *Router[T]) takeOutbox() []record {
	d := r.delivery
	d.inflight.Add(int64(len(r.outbox)))
	batch := r.outbox
	r.outbox, d.returned = d.returned, nil
	return batch
}

// deliverLoop is the Router's delivery goroutine, started by New when
// OnEvent or Logger is set and ended by Close once every event is
// delivered. It takes the outbox as a batch and calls the hooks outside the
// lock, so events reach them in the order of the transitions and a hook
// that calls back into the Router appends to the queue this goroutine will
// drain next instead of deadlocking.
func (r *Router[T]) deliverLoop() {
	d := r.delivery
	goexit := true // until the loop returns: a hook called runtime.Goexit
	defer func() {
		if goexit {
			delivery.Exited(&d.cur, d.batch, hooks[T]{r})
			go r.deliverLoop() // owned by Close, as the one it replaces
			return
		}
		close(d.done)
	}()
	d.goid.Store(goid.Current())
	lingering := false
	timer := time.NewTimer(linger)
	defer timer.Stop()
	for {
		if d.batch == nil {
			batch, open := r.nextBatch(lingering, timer)
			if !open {
				goexit = false
				return
			}
			if len(batch) == 0 {
				lingering = false
				continue
			}
			d.batch, d.cur = batch, delivery.Cursor{}
		}
		batch := d.batch
		delivery.Deliver(&d.cur, batch, hooks[T]{r})
		clear(batch) // drop references to errors and IDs; emit relies on zero slots
		d.batch = nil
		lingering = len(batch) >= lingerAbove
		if cap(batch) <= 2*eventBacklog {
			d.returned = batch[:0] // reuse it, unless a burst made it large
		}
	}
}

// nextBatch waits for the next batch of events and returns it, possibly
// empty; open is false once the Router is closed and every event is
// delivered. After a large batch it lingers (see linger), else, or when
// the linger brought nothing, it takes r.mu, takes what waits, or sleeps
// until a caller hands events over.
func (r *Router[T]) nextBatch(lingering bool, timer *time.Timer) (batch []record, open bool) {
	d := r.delivery
	if lingering && !d.waiting.Load() && !closed(r.closing) {
		select {
		case <-d.kick: // left by a hand-off that raced a timer: it would cut this linger short
		default:
		}
		d.state.Store(deliverLingers)
		// Looked at again after the store: a caller that began to wait
		// before it sees deliverLingers and hands over what waits.
		if !d.waiting.Load() && !closed(r.closing) {
			timer.Reset(linger)
			select {
			case <-d.kick:
			case <-timer.C:
			}
		}
		if d.state.CompareAndSwap(deliverLingers, deliverWants) {
			// Nothing handed over yet: the next caller to release r.mu
			// will, unless the stream has paused.
			for i := 0; i < wantTries && d.state.Load() == deliverWants; i++ {
				runtime.Gosched()
			}
		}
		if d.state.Load() == deliverBusy {
			return d.take(), true
		}
	}
	r.mu.Lock()
	if d.handed != nil { // handed over after the linger gave up, before the lock
		r.mu.Unlock()
		return d.take(), true
	}
	if len(r.outbox) > 0 {
		d.state.Store(deliverBusy)
		batch = r.takeOutbox()
		r.mu.Unlock()
		return batch, true
	}
	r.progressed() // nothing waits: whoever waits for progress has it
	if r.phase == phaseClosed {
		d.state.Store(deliverBusy)
		r.mu.Unlock()
		return nil, false
	}
	if cap(r.outbox) > idleKeep {
		r.outbox = nil
	}
	if cap(d.returned) > idleKeep {
		d.returned = nil
	}
	d.state.Store(deliverIdle)
	r.mu.Unlock()
	for d.state.Load() != deliverBusy {
		<-d.kick // a kick left from a linger may come first: look again
	}
	return d.take(), true
}

// take returns the batch a caller handed over. The caller saw state
// deliverBusy after asking for a batch.
func (d *handoff) take() []record {
	batch := d.handed
	d.handed = nil
	return batch
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// hooks is the delivery goroutine's side of delivery.Deliver: the
// Router's hooks, records turned into events, and its progress counted
// without r.mu unless a caller waits or hooks panicked (delivered). A
// value of one pointer, so that passing it allocates nothing.
type hooks[T any] struct{ r *Router[T] }

// IsReport reports whether rec is a report entry (contract.KindReport),
// logged through the Logger, not an event.
func (h hooks[T]) IsReport(rec *record) bool { return rec.kind == contract.KindReport }

// Report returns a report entry's message and job.
func (h hooks[T]) Report(rec *record) (msg, jobID string) { return rec.err.Error(), rec.jobID }

// Kind returns rec's kind (named in reports) and job.
func (h hooks[T]) Kind(rec *record) (fmt.Stringer, string) { return rec.kind, rec.jobID }

// Deliver builds rec's event once, on the stack, and gives it to OnEvent
// (unless OnEvent already had it: c.OnEventDue), then to the Logger,
// telling c when the Logger's turn begins (c.LoggerNext), so that a
// panic is blamed on the hook that raised it. User code; no lock held.
func (h hooks[T]) Deliver(rec *record, c *delivery.Cursor) {
	e := h.r.event(rec)
	if f := h.r.opts.OnEvent; f != nil && c.OnEventDue() {
		f(e)
	}
	c.LoggerNext()
	if l := h.r.opts.Logger; l != nil {
		logEvent(l, &e)
	}
}

// Logger is Options.Logger, for reports; nil if unset.
func (h hooks[T]) Logger() *slog.Logger { return h.r.opts.Logger }

// Panicked counts the panic at the next progress (delivered), so that
// the delivery goroutine takes r.mu once for many.
func (h hooks[T]) Panicked() { h.r.delivery.panics++ }

// Progress counts the entries delivered since its last call
// (delivered: atomics, r.mu only if a producer waits or hooks panicked).
func (h hooks[T]) Progress(c *delivery.Cursor) { h.r.delivered(c.Delivered()) }

// reportPanic counts a recovered panic of a user callback and queues its
// report for the delivery goroutine, so the caller never waits for the
// Logger. It returns false when the Router has no delivery goroutine (and
// no Logger): the caller then reports to slog.Default() itself, after
// releasing the lock. The caller holds r.mu.
func (r *Router[T]) reportPanic(err error, jobID string) (queued bool) {
	r.stats.CallbackPanics++
	if r.hooked {
		rec := r.push()
		rec.kind, rec.jobID, rec.err = contract.KindReport, jobID, err
	}
	return r.hooked
}

// reportUserCode reports msg about user code (a periodic job's callbacks,
// a caller's context) at level Error, as a recovered panic of Backoff is (panicked: counted in Stats.CallbackPanics): queued for the
// delivery goroutine, which logs it through Options.Logger, or logged to
// slog.Default() here when the Router has no delivery goroutine (no
// Logger) or is closed.
func (r *Router[T]) reportUserCode(msg, jobID string, panicked bool) {
	r.mu.Lock()
	queued := false
	if r.phase != phaseClosed {
		if panicked {
			r.stats.CallbackPanics++
		}
		if r.hooked {
			rec := r.push()
			rec.kind, rec.jobID, rec.err = contract.KindReport, jobID, errors.New(msg)
			queued = true
		}
	}
	r.unlockAndDeliver()
	if !queued {
		contract.ReportTo(slog.Default(), msg, jobID)
	}
}
