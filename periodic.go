package leaserouter

// Periodic jobs: AddPeriodic and RemovePeriodic, and the set they change
// (by name, and a min-heap of the jobs' next wake-ups). The scheduler
// goroutine that enqueues the ticks, one per Router on one timer, is
// periodic_scheduler.go.

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/heap"
)

// AddPeriodic starts enqueuing p's job at each tick of p.Schedule, from
// now on, on the Router's own scheduler goroutine (started by the first
// AddPeriodic, stopped and waited for by Close).
//
// The job of the tick t has ID TickID(p.Name, t), payload p.Payload(t)
// (the zero T if Payload is nil) and options p.Options plus WithRunAt(t):
// the tick is the run-at (enqueued at t or later, the job is ready at
// once, with no Job.RunAt). The rule, the same on every backend, is at
// each wake-up: enqueue the latest due tick not handled yet, never a
// backlog of older ones, and only while it is younger than
// Options.Retention. So:
//
//   - a tick at or after the instant of AddPeriodic is enqueued; the
//     latest tick before it is not (a first start does not catch up);
//   - after the process was paused (the scheduler woke late, or Payload
//     took long), only the latest missed tick is enqueued, and only while
//     younger than Retention: no flood of catch-up jobs;
//   - an Enqueue refused with ErrDuplicate is not an error (an earlier
//     wake-up, or another scheduler on the same job set, enqueued that
//     tick); ErrFull or any other error is reported at level Error
//     through Options.Logger (slog.Default() if nil) and the tick is
//     skipped; ErrClosed ends the scheduler.
//
// Exactly one job per tick comes from the dedup of job IDs, not from
// electing a leader: every scheduler computes the same ID for a tick, and
// the job's record (kept Retention after it finishes) refuses the same
// tick again for as long as any scheduler could still enqueue it. The
// in-process job set does not survive Close: a new Router starts afresh,
// and ticks while no Router runs get no job.
//
// p.Schedule.Next and p.Payload are user code: called on the scheduler's
// goroutine, never under a lock. A panic in either is recovered, counted
// in Stats.CallbackPanics and reported at level Error (as a panic of
// Options.Backoff is). A Payload that panics skips that tick. A Next that
// panics or does not move forward (returns an instant not after its
// argument; reported, not counted) ends that periodic job's schedule, the
// other periodic jobs going on; the wake-up it failed in enqueues nothing.
// A Next returning the zero Time ends the schedule quietly. A
// schedule with many ticks to step through takes turns with the other
// periodic jobs (see Schedule): its cost delays their ticks by at most
// one turn of 65,536 calls of its Next. Neither should block: while one
// does, the other periodic jobs of the Router wait, and Close waits for
// it until its ctx is done (the goroutine then ends when the call
// returns). An ended periodic job keeps its Name until RemovePeriodic.
//
// It returns an error wrapping ErrInvalidOptions that names the problem
// for an empty Name or one that breaks the rule for IDs with the tick's
// room taken (see Periodic.Name), a nil Schedule, an Every(d) with d <=
// 0, an option Enqueue would refuse, WithRunAt or WithDelay among
// Options, a negative Options.Retention (exactly one job per tick needs
// each tick's dedup record) — the same checks and messages on every
// backend — and for a Name already added on this Router (and not
// removed); ErrClosed for a nil
// *Router and after Close (or once Close has begun). It does not block
// beyond short locks. Safe for concurrent use; p.Options is copied.
func (r *Router[T]) AddPeriodic(p Periodic[T]) error {
	// One job per tick by the dedup of IDs, not by electing a leader,
	// answers known failures of leader-based schedulers: River's periodic
	// jobs enqueued twice around a change of leader (riverqueue/river#283,
	// fixed with leadership terms in #1213); asynq's schedulers
	// duplicating tasks when more than one runs (hibiken/asynq#1013, #371,
	// #554, #395). The rule of which tick a wake-up enqueues is
	// internal/periodic.Due's. A wake-up is planned whole: it asks Next
	// for the tick after the due one too, so a Next that fails makes its
	// wake-up enqueue nothing.
	return r.addPeriodic(p, 0)
}

// addPeriodic is AddPeriodic of a periodic job whose ticks' jobs have
// kind (a Client's Kind, kind_periodic.go; 0 for a Router's own).
func (r *Router[T]) addPeriodic(p Periodic[T], kind uint16) error {
	if r == nil {
		return ErrClosed
	}
	if err := contract.CheckPeriodic(ErrInvalidOptions, ErrInvalidJob, p.Name, p.Schedule, p.Options, r.opts.Retention); err != nil {
		return err
	}
	// The options of every tick: p.Options, then WithRunAt(tick) in the
	// last slot, set by the scheduler (which owns the slice).
	opts := append(slices.Clone(p.Options), WithRunAt(time.Time{}))
	p.Options = nil
	r.mu.Lock()
	if r.phase != phaseOpen {
		r.unlockAndDeliver()
		return ErrClosed
	}
	now := r.now()
	per := r.periodics
	if per == nil {
		per = newPeriodics[T]()
		r.periodics = per
		go r.schedulePeriodics(per) // owned by Close, which waits on per.done
	}
	r.unlockAndDeliver()

	per.mu.Lock()
	defer per.mu.Unlock()
	switch {
	case per.stopped:
		return ErrClosed
	case per.names[p.Name] != nil && kind == 0:
		return fmt.Errorf("%w: Periodic %s is already added on this Router", ErrInvalidOptions, contract.Quote(p.Name))
	case per.names[p.Name] != nil:
		// A Client's queue: its Kinds share the queue's names.
		return fmt.Errorf("%w: Periodic %s is already added on queue %s", ErrInvalidOptions, contract.Quote(p.Name), contract.Quote(r.queue))
	}
	per.seq++
	e := &periodicJob[T]{p: p, opts: opts, kind: kind, since: r.timeAt(now).Round(0), wake: now, seq: per.seq, idx: -1}
	per.names[p.Name] = e
	per.wakes.Push(e)
	per.kickLocked()
	return nil
}

// RemovePeriodic stops the periodic job named name: no tick after the
// call gets a job from this Router (a tick the scheduler was handling as
// it was called may still get its job), and the name may be added again.
// Jobs already enqueued stay. It returns an error wrapping ErrNotFound for
// a name not added (or removed already), and ErrClosed for a nil *Router
// and after Close. It does not block beyond short locks and does not wait
// for a Payload or Schedule.Next in progress. Safe for concurrent use.
func (r *Router[T]) RemovePeriodic(name string) error {
	return r.removePeriodic(name, 0)
}

// removePeriodic is RemovePeriodic of the periodic job named name whose
// ticks' jobs have kind: one of another kind (added by another Kind of
// a Client's queue, or by the Router's own AddPeriodic) is not found.
func (r *Router[T]) removePeriodic(name string, kind uint16) error {
	if r == nil {
		return ErrClosed
	}
	r.mu.Lock()
	open, per := r.phase == phaseOpen, r.periodics
	r.unlockAndDeliver()
	if !open {
		return ErrClosed
	}
	if per == nil {
		return fmt.Errorf("%w: periodic job %s", ErrNotFound, contract.Quote(name))
	}
	per.mu.Lock()
	defer per.mu.Unlock()
	e := per.names[name]
	switch {
	case per.stopped:
		return ErrClosed
	case e == nil, e.kind != kind:
		return fmt.Errorf("%w: periodic job %s", ErrNotFound, contract.Quote(name))
	}
	delete(per.names, name)
	e.removed = true
	if e.idx >= 0 {
		per.wakes.Remove(e.idx)
	}
	per.kickLocked()
	return nil
}

// periodics is a Router's scheduler of periodic jobs. Its goroutine owns
// each periodicJob's since, last and opts; mu guards the rest. mu is a
// leaf: held for heap operations only, never with user code running, and
// no other lock is taken under it.
type periodics[T any] struct {
	kick chan struct{} // cap 1: the heap changed, re-arm the timer
	done chan struct{} // closed when the goroutine has ended
	goid atomic.Uint64 // the goroutine's ID (Close from Payload must not wait for itself)

	mu      sync.Mutex
	names   map[string]*periodicJob[T]
	wakes   *heap.Heap[*periodicJob[T]] // by wake, then seq; a job being handled is out of it
	seq     uint64
	stopped bool // Close has begun: no more user code
	inUser  bool // the goroutine is calling Schedule.Next or Payload
}

// periodicJob is one added Periodic.
type periodicJob[T any] struct {
	p       Periodic[T]
	opts    []EnqueueOption // p.Options + WithRunAt(tick)
	kind    uint16          // the kind of its ticks' jobs (a Client's Kind; 0: the Router's)
	since   time.Time       // the router's clock at AddPeriodic (wall only)
	last    time.Time       // the latest tick handled; zero for none
	wake    int64           // when to run Due next, on the router's clock
	seq     uint64          // order of arrival in wakes (AddPeriodic, a split wake-up's turn), for ties
	idx     int             // position in wakes, -1 when out of it
	removed bool            // RemovePeriodic
	ended   bool            // the schedule has no more ticks, or failed
}

func newPeriodics[T any]() *periodics[T] {
	return &periodics[T]{
		kick:  make(chan struct{}, 1),
		done:  make(chan struct{}),
		names: make(map[string]*periodicJob[T]),
		wakes: heap.New(func(a, b *periodicJob[T]) bool {
			return a.wake < b.wake || a.wake == b.wake && a.seq < b.seq
		}, func(e *periodicJob[T], i int) { e.idx = i }),
	}
}

// kickLocked wakes the goroutine to re-read the heap. The caller holds
// per.mu.
func (per *periodics[T]) kickLocked() {
	select {
	case per.kick <- struct{}{}:
	default: // a kick is pending already
	}
}
