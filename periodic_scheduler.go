package leaserouter

// The scheduler goroutine of periodic jobs (periodic.go): it sleeps on
// one timer until the earliest wake-up of the periodic jobs' heap, plans
// each job's tick by the shared rule (internal/periodic.Due), calls its
// Payload and enqueues the tick's job; Close halts it and waits for it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/goid"
	"github.com/leaserouter/leaserouter/internal/periodic"
)

// halt marks the scheduler stopped, so that its goroutine calls no more
// user code and ends, and reports whether it is in user code now. Close
// calls it with r.mu held, as the Router leaves phaseOpen (per.mu is a
// leaf under r.mu).
func (per *periodics[T]) halt() (inUser bool) {
	per.mu.Lock()
	defer per.mu.Unlock()
	per.stopped = true
	return per.inUser
}

// wait waits for the goroutine to end once halted: always when it was not
// in user code as halt was called (it ends at once: its Enqueue returns
// ErrClosed and its sleep sees r.closing), else until ctx is done; never
// when called from that user code (Close from Payload), which would wait
// for itself.
func (per *periodics[T]) wait(ctx context.Context, inUser bool) {
	if !inUser {
		<-per.done
		return
	}
	if goid.Current() == per.goid.Load() {
		return
	}
	contract.WaitFor(ctx, per.done)
}

// enter marks the goroutine as calling user code, unless Close has begun;
// it reports whether it may.
func (per *periodics[T]) enter() bool {
	per.mu.Lock()
	defer per.mu.Unlock()
	per.inUser = !per.stopped
	return per.inUser
}

func (per *periodics[T]) leave() {
	per.mu.Lock()
	per.inUser = false
	per.mu.Unlock()
}

// schedulePeriodics is the scheduler's goroutine: it sleeps on one timer
// until the earliest wake-up of the heap, handles the periodic jobs due,
// and ends when Close begins or Enqueue returns ErrClosed.
func (r *Router[T]) schedulePeriodics(per *periodics[T]) {
	defer close(per.done)
	per.goid.Store(goid.Current())
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		per.mu.Lock()
		if per.stopped {
			per.mu.Unlock()
			return
		}
		now := r.now()
		e, ok := per.wakes.Peek()
		if ok && e.wake <= now {
			per.wakes.Pop() // out while handled: RemovePeriodic only marks it
			per.mu.Unlock()
			closed := r.handlePeriodic(per, e, now)
			per.mu.Lock()
			if !e.removed && !e.ended {
				if e.wake <= now {
					// A wake-up Due split (a schedule with more ticks than
					// it steps through at once): the rest waits behind every
					// other job due by now, so a schedule denser than its
					// Next can step through takes turns with the others
					// instead of staying first for ever.
					per.seq++
					e.wake, e.seq = max(now, r.now()), per.seq
				}
				per.wakes.Push(e)
			}
			per.mu.Unlock()
			if closed {
				return
			}
			continue
		}
		per.mu.Unlock()
		if ok {
			timer.Reset(time.Duration(e.wake - now))
		} else {
			timer.Stop()
		}
		select {
		case <-timer.C:
		case <-per.kick:
		case <-r.closing:
			return
		}
	}
}

// handlePeriodic runs e's wake-up at now: plans it (periodic.Due),
// enqueues the tick due, if any, and sets e's next wake-up or ends it. It
// reports whether Enqueue found the Router closed.
func (r *Router[T]) handlePeriodic(per *periodics[T], e *periodicJob[T], now int64) (closed bool) {
	if !per.enter() {
		return true
	}
	plan, err := periodic.Due(e.p.Schedule, e.since, e.last, r.timeAt(now).Round(0), r.opts.Retention)
	per.leave()
	if err != nil {
		e.ended = true
		r.reportUserCode(fmt.Sprintf("leaserouter: periodic job %s: %v; its schedule ended", contract.Quote(e.p.Name), err),
			e.p.Name, !errors.Is(err, periodic.ErrStuck))
		return false
	}
	e.last = plan.Handled
	if !plan.Tick.IsZero() && r.enqueueTick(per, e, plan.Tick) {
		return true
	}
	if plan.Next.IsZero() {
		e.ended = true // no more ticks
		return false
	}
	// Next has no monotonic reading: Sub uses the wall clock of the
	// epoch, the clock r.timeAt(now).Round(0) reads too.
	e.wake = int64(plan.Next.Sub(r.epoch))
	return false
}

// enqueueTick enqueues e's job of tick, and reports whether Enqueue found
// the Router closed.
func (r *Router[T]) enqueueTick(per *periodics[T], e *periodicJob[T], tick time.Time) (closed bool) {
	id := TickID(e.p.Name, tick)
	var payload T
	if e.p.Payload != nil {
		if !per.enter() {
			return true
		}
		p := contract.Recovered(func() { payload = e.p.Payload(tick) })
		per.leave()
		if p != nil {
			r.reportUserCode(contract.PayloadPanicked(e.p.Name, p), id, true)
			return false
		}
	}
	per.mu.Lock()
	removed := e.removed
	per.mu.Unlock()
	// Payload may have taken long: a tick as old as the retention may have
	// had its job, finished and purged already, so it is not enqueued.
	if removed || r.now() >= addSat(int64(tick.Sub(r.epoch)), r.opts.Retention) {
		return false
	}
	e.opts[len(e.opts)-1] = WithRunAt(tick)
	err := r.enqueue(id, payload, e.kind, e.opts, nil)
	switch {
	case err == nil, errors.Is(err, ErrDuplicate):
	case errors.Is(err, ErrClosed):
		return true
	default:
		r.reportUserCode(contract.TickSkipped(e.p.Name, err), id, false)
	}
	return false
}
