package leaserouter

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// Run's workers: each leases a batch of jobs under one lock, runs their
// handlers in turn, and completes them with its next batch; the heartbeat
// goroutine (heartbeat.go) cuts a batch that outlasts its first heartbeat.
// See Run for the rule.
//
// SAME RULE on every backend, written once in internal/contract
// (worker.go) and pinned by internal/routertest's workers and snooze
// rows: the next batch's size (NextBatch, in adapt), when a worker starts
// no more jobs (Stopping), the handler's call with its panic caught
// (CallHandler), what its return does (AfterHandler) and the attempt's
// timeout (AttemptTimeout, in Router.limit). Stopping's Close half is
// pinned by contract's TestStopping only: no row can see it, because a
// closing router also refuses the worker's next lease.
//
// TUNED to this backend, which pays for a lock hold where pgrouter pays
// for a round trip: a batch's finished jobs are completed under the same
// hold that leases the next batch (runStep); a worker yields the
// processor before it blocks on the lock (lockYielding, yieldShort), so
// that two workers taking turns do not run on one processor; a batch is
// the worker's share of the ready jobs with the callers waiting
// (share), read under r.mu; leases come in blocks of up to maxShared allocated
// outside the lock, a batch taking the rest of one block and as many new
// ones as it needs (take), so that nearly every lease allocated is
// handed out. A lease lost while its handler ran is known for certain
// here (the stop's cause wraps ErrLeaseLost), so Run leaves that job
// alone; pgrouter must also tell a lease it could not prove valid, which
// it releases.

// slot is one worker's batch, shared with the heartbeat goroutine, which
// heartbeats the running lease and cuts a batch that outlasts its first
// heartbeat (cut).
type slot[T any] struct {
	mu      sync.Mutex     // held by the heartbeat goroutine while it beats or cuts, so the worker never races it for a lease
	batch   []*runLease[T] // the batch's leases, in order; nil between batches
	ready   []readyAt      // how each job of batch was ready before it (for handBack)
	next    int            // batch[:next] started, batch[next:] waiting their turn
	running bool           // batch[next-1]'s handler runs
	done    []*Lease[T]    // started leases whose handler returned nil, not yet completed
	due     int64          // the next heartbeat on the router's clock; math.MaxInt64 if none
	_       [24]byte       // keep workers' slots on separate cache lines (128 bytes)
}

// runLease is a Lease granted to Run with its handler context, which
// watches the lease from the start (so a loss right after the grant
// already cancels it).
type runLease[T any] struct {
	Lease[T]
	handlerCtx leaseCtx
}

// worker is one worker loop of Run and what it keeps between batches.
type worker[T any] struct {
	u     *runner[T]
	s     *slot[T]
	id    string
	ctx   context.Context // the handlers' parent (their leaseCtx points here)
	size  int             // the most jobs to lease next (see Run)
	got   int             // how many it leased last time
	short bool            // the last step leased less than half of what it asked for
	// Memory reused across steps: the leases allocated and not handed
	// out yet, in order, a block after another (see take), how many of
	// each block are still in the pool (front first) and whether some of
	// the first were handed out, the batch running (nil entries between
	// batches), the pointers handed to the router (nil between steps),
	// the ready times it fills in, the spare done list.
	pool      []*runLease[T]
	blocks    []int
	firstUsed bool
	batch     []*runLease[T]
	into      []*Lease[T]
	ready     []readyAt
	done      []*Lease[T]
	// allocated counts the leases allocated since the worker started, so
	// tests can check that nearly every one is handed out.
	allocated int
}

// work is the worker's loop. It returns nil when ctx is done or the
// Router closed, and the error when it can get no more leases
// (ErrTokensExhausted).
func (w *worker[T]) work(ctx context.Context) error {
	// A context of the worker's own as the handlers' parent, so that making
	// one (it registers with its parent) contends with no other worker.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.ctx = ctx
	for {
		batch, ready, err := w.lease()
		if err != nil {
			if errors.Is(err, ErrTokensExhausted) {
				return err
			}
			return nil // ctx done or Router closed
		}
		w.run(batch, ready)
	}
}

// lease completes the jobs of the last batch that finished and leases the
// next batch, under one lock when a job is ready and the event backlog has
// room; otherwise it leases as Acquire does, waiting.
func (w *worker[T]) lease() ([]*runLease[T], []readyAt, error) {
	s, r := w.s, w.u.r
	s.mu.Lock()
	done := s.done
	s.done = w.done[:0]
	s.mu.Unlock()
	// As many leases as the worker got last time, doubled (with a shallow
	// backlog it gets a job or two per batch), up to size.
	want := min(w.size, max(1, 2*w.got))
	w.take(want)
	if w.short {
		// The last batch came up short: the backlog is shallow, its
		// producers slower than the workers. Yielding a little first lets
		// them in (and at the lock), so the next batch is larger and the
		// workers contend with them less.
		yieldShort()
	}
	n := r.runStep(done, w.id, w.into, w.ready, w.ctx.Err() == nil)
	clear(done)
	w.done = done[:0]
	if n == 0 && w.ctx.Err() == nil {
		// Nothing ready: before blocking, which costs the producer that
		// wakes it a wake-up, give the producers a moment, as above.
		yieldShort()
		n = r.runStep(nil, w.id, w.into, w.ready, w.ctx.Err() == nil)
	}
	if n == 0 {
		if w.dropShared() > 0 {
			// Wait with a lease of a block of its own (the pool's next,
			// or a new one): a worker that waits gets a job or two.
			w.take(1)
		}
		err := r.await(w.ctx, func(now int64) (err error) {
			k := r.share(len(w.into))
			n, err = r.grantInto(w.id, now, w.into[:k], w.ready[:k])
			return err
		})
		if err != nil {
			clear(w.into)
			return nil, nil, err
		}
	}
	w.got, w.short = n, n < len(w.into)/2
	clear(w.into) // the router keeps no pointer into it; neither should the worker
	batch := w.handOut(n)
	for _, rl := range batch {
		rl.ownProgress()
	}
	return batch, w.ready[:n], nil
}

// take sets up want unused leases for Run, the pool's first, with w.into
// pointing at them and w.ready long enough. The pool is topped up here,
// outside the router's lock, with blocks of at most maxShared leases, each
// as many as the batch still lacks, rounded up to fill its allocation's
// size class: a batch takes the rest of a block an earlier one began and
// as many new blocks as it needs, and the leases it is not granted are the
// next batch's, so nearly every lease allocated is handed out (the only
// ones wasted are the rest of a block begun when the worker waits, see
// dropShared, and the pool when it stops). A worker fed one job at a time
// allocates a lease or two per job, not a block. Since a block holds at
// most maxShared leases, fewer than maxShared of one are handed out before
// a later batch takes from it: a long job keeps fewer than maxShared
// finished leases of earlier batches (and their jobs and payloads) alive
// with it.
func (w *worker[T]) take(want int) {
	for len(w.pool) < want {
		// 15 of runLease[int] fill 2,304 bytes (16 would take 2,688).
		block := slices.Grow([]runLease[T](nil), min(want-len(w.pool), maxShared))
		block = block[:min(cap(block), maxShared)]
		w.blocks = append(w.blocks, len(block))
		w.allocated += len(block)
		for i := range block {
			rl := &block[i]
			rl.handlerCtx.parent = &w.ctx
			rl.lost = &rl.handlerCtx
			w.pool = append(w.pool, rl)
		}
	}
	clear(w.into) // pointers into an earlier block must not keep it alive
	w.into, w.ready = w.into[:0], slices.Grow(w.ready[:0], want)[:want]
	for _, rl := range w.pool[:want] {
		w.into = append(w.into, &rl.Lease)
	}
}

// handOut takes the pool's first n leases, granted, out of it and returns
// them as the batch (w.batch, whose entries run clears when the batch is
// over). A lease leaves the pool once, so no lease a handler may keep is
// ever granted again.
func (w *worker[T]) handOut(n int) []*runLease[T] {
	w.batch = append(w.batch[:0], w.pool[:n]...)
	w.dropFirst(n)
	for n > 0 {
		m := min(n, w.blocks[0])
		w.blocks[0] -= m
		n -= m
		w.firstUsed = w.blocks[0] > 0
		if !w.firstUsed {
			w.dropBlock()
		}
	}
	return w.batch
}

// dropShared drops the rest of the pool's first block if some of it was
// handed out, and returns how many leases it dropped: a worker about to
// wait, maybe long, must not keep the leases of its earlier batches (and
// their jobs and payloads) alive meanwhile. The whole blocks after it
// stay. At most maxShared-1 leases are dropped, once per wait.
func (w *worker[T]) dropShared() int {
	if !w.firstUsed {
		return 0
	}
	k := w.blocks[0]
	w.dropFirst(k)
	w.dropBlock()
	w.firstUsed = false
	return k
}

// dropBlock forgets the pool's first block (none of it is in the pool).
func (w *worker[T]) dropBlock() {
	w.blocks = w.blocks[:copy(w.blocks, w.blocks[1:])]
}

// dropFirst takes the pool's first n leases out of it.
func (w *worker[T]) dropFirst(n int) {
	rest := copy(w.pool, w.pool[n:])
	clear(w.pool[rest:])
	w.pool = w.pool[:rest]
}

// runStep is a Run worker's step between batches, under one lock: it
// completes done (the jobs of its last batch that finished) and, if grant
// and the Router is open with room for events, leases into into its share
// of the ready jobs (share), with how they were ready into ready. It
// returns how many it leased; with 0 the worker leases as Acquire does.
// Completing never waits for room: it is a lease operation.
func (r *Router[T]) runStep(done []*Lease[T], workerID string, into []*Lease[T], ready []readyAt, grant bool) int {
	r.lockYielding()
	now := r.settleNow()
	r.completeMany(done, now)
	n := 0
	if grant && r.phase == phaseOpen && !r.backlogFull() {
		k := r.share(len(into))
		n, _ = r.grantInto(workerID, now, into[:k], ready[:k]) // an error: acquire returns it
	}
	r.unlockAndDeliver()
	return n
}

// lockYielding takes r.mu for a Run worker between batches. While another
// goroutine holds it, it yields the processor (runtime.Gosched) and tries
// again, up to lockYields times, before blocking in Lock. A goroutine
// blocked in Lock is woken onto the processor of the one that unlocked,
// which runs on with its own batch, so two workers taking turns on the
// lock would run one at a time on one processor (measured: 1.35 of 2 cores
// busy, no faster than one worker). Yielding leaves the processor to any
// other goroutine that can run, so only an otherwise idle one is spent,
// for at most the length of a few batches. Everyone else takes the lock
// with Lock (yielding producers were measured 35-50% slower when many
// contend); one that waits in Lock for a millisecond puts the mutex in
// its starvation mode, where TryLock fails, so a yielding worker never
// keeps the lock from them for long.
func (r *Router[T]) lockYielding() {
	for range lockYields {
		if r.mu.TryLock() {
			return
		}
		runtime.Gosched()
	}
	r.mu.Lock()
}

// lockYields bounds lockYielding's tries: a few hundred microseconds,
// longer than the step of a batch of MaxBatch jobs.
const lockYields = 2048

// maxShared is the most leases in one of Run's blocks, and so bounds the
// leases of one block handed out to earlier batches before a later batch
// takes from it (see take).
const maxShared = 16

// yieldShort yields the processor shortYields times.
func yieldShort() {
	for range shortYields {
		runtime.Gosched()
	}
}

// shortYields is how many times a worker yields before a step that
// follows a short batch (worker.lease): about as long as a few Enqueue
// calls take.
const shortYields = 64

// share is how many jobs a worker asking for want leases: its share of
// the ready jobs with those blocked in Acquire (or AcquireMany: other
// workers, other Runs) or woken for a job and not back for it yet, and at
// least one, within the room left in the
// event backlog (roomFor). The caller holds r.mu.
func (r *Router[T]) share(want int) int {
	return r.roomFor(max(1, min(want, r.grantable()/(1+len(r.waiters)+r.woken))))
}

// run runs a batch: each lease's handler in turn, until the batch ends or
// is cut; then it adapts the size of the next one.
func (w *worker[T]) run(batch []*runLease[T], ready []readyAt) {
	u, s := w.u, w.s
	due := addSat(batch[0].granted, u.interval)
	s.mu.Lock()
	s.batch, s.ready, s.next, s.due = batch, ready, 0, due
	s.mu.Unlock()
	if due < u.wake.Load() {
		select {
		case u.kick <- struct{}{}:
		default:
		}
	}
	// The handler that returned last, recorded under the same hold of
	// s.mu that picks the next job (one hold a job, not two).
	returned, toComplete := false, (*Lease[T])(nil)
	for {
		s.mu.Lock()
		if returned {
			s.running = false
			if toComplete != nil {
				s.done = append(s.done, toComplete)
			}
			returned, toComplete = false, nil
		}
		if s.next < len(s.batch) && w.stopping() {
			u.cut(s) // hand back what has not started
		}
		if s.next == len(s.batch) { // the batch is over, or was cut
			cut := len(s.batch) < len(batch)
			s.batch, s.ready, s.due = nil, nil, math.MaxInt64
			s.mu.Unlock()
			w.adapt(cut, batch[0].granted)
			clear(batch) // the worker keeps no finished lease alive
			return
		}
		rl := s.batch[s.next]
		s.next++
		s.running = true
		s.mu.Unlock()
		returned, toComplete = true, w.process(rl)
	}
}

// stopping reports whether the worker must start no more jobs
// (contract.Stopping): Run's ctx is done or Close has started.
func (w *worker[T]) stopping() bool { return contract.Stopping(w.ctx, w.u.r.closingStarted.Load()) }

// adapt sets the size of the next batch (see Run) from how the last one,
// leased at granted, went.
func (w *worker[T]) adapt(cut bool, granted int64) {
	took := time.Duration(w.u.r.now() - granted)
	w.size = contract.NextBatch(w.size, w.u.batch, cut, took, w.u.interval)
}

// process runs the handler on rl and ends the lease as Run documents. It
// returns the lease if the handler's nil result completes it: the caller
// marks the handler finished and adds it to the slot's done list,
// completed with the next lease. Any other end it makes itself, once it
// has marked the handler finished; then it returns nil, and so does it
// for a lease lost meanwhile.
func (w *worker[T]) process(rl *runLease[T]) *Lease[T] {
	l := &rl.Lease
	if !rl.handlerCtx.live() {
		// Lost while it waited its turn (Cancel, say): nothing to run.
		return nil
	}
	err := w.call(rl)
	if earlier := rl.handlerCtx.returned(); earlier != nil && errors.Is(earlier, ErrLeaseLost) {
		// The lease was lost while h ran (and an event said so): acting
		// on it now could only be refused.
		return nil
	}
	// A snooze and whether Run is stopping matter only to an error
	// (AfterHandler): nearly every result is nil, which pays for neither.
	var d time.Duration
	snoozed, stopping := false, false
	if err != nil {
		d, snoozed = SnoozeDelay(err)
		stopping = w.ctx.Err() != nil
	}
	outcome, cause := contract.AfterHandler(ErrInvalidOptions, err, stopping, d, snoozed)
	if outcome == contract.Complete {
		return l // completed with the next lease, even if ctx is done now
	}
	w.finished()
	switch outcome {
	case contract.Release:
		_ = l.Release() // refused only if the lease was lost: nothing left to do
	case contract.Snooze:
		_ = l.Snooze(d)
	default:
		_ = l.Fail(cause)
	}
	return nil
}

// call runs the handler on rl, under the attempt's timeout if it has
// one (see WorkerOptions.Timeout).
func (w *worker[T]) call(rl *runLease[T]) error {
	l := &rl.Lease
	d := w.u.r.limit(l.j, w.u.timeout)
	if d == 0 {
		return contract.CallHandler(w.u.h, &rl.handlerCtx, l)
	}
	ctx, cancel := withTimeout(rl.handlerCtx.ctx(), l, d)
	defer cancel()
	return contract.CallHandler(w.u.h, ctx, l)
}

// finished records that the running handler returned, before process
// ends its lease other than by completion (so no heartbeat races the end).
func (w *worker[T]) finished() {
	s := w.s
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
}

// cut ends a batch's wait, under one router lock: the jobs that finished
// are completed and those not started handed back (handBack), leaving only
// the running one, if any. The heartbeat goroutine cuts a batch whose
// first heartbeat is due, a worker its own when it stops. The caller holds
// s.mu.
func (u *runner[T]) cut(s *slot[T]) {
	waiting := s.batch[s.next:]
	if len(waiting) == 0 && len(s.done) == 0 {
		return
	}
	r := u.r
	r.mu.Lock()
	now := r.settleNow()
	r.completeMany(s.done, now)
	for i := range waiting {
		// One lost while it waited (Cancel, Close: a closed Router has
		// no lease) is left alone, as process leaves it.
		if l := &waiting[i].Lease; r.valid(l) {
			r.handBack(l.j, l, now, s.ready[s.next+i])
		}
	}
	r.unlockAndDeliver()
	clear(s.done)
	s.done = s.done[:0]
	s.batch = s.batch[:s.next]
}
