package leaserouter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter/internal/goid"
	"github.com/leaserouter/leaserouter/internal/heap"
	"github.com/leaserouter/leaserouter/internal/hook"
	"github.com/leaserouter/leaserouter/internal/table"
)

// Errors returned by the package, for errors.Is. Messages start with
// "leaserouter:"; returned errors may wrap them with more context.
var (
	// ErrLeaseLost: an operation on a lease that is no longer valid (expired,
	// superseded, ended, revoked by Close). The error is a *LeaseLostError.
	ErrLeaseLost = errors.New("leaserouter: lease lost")
	// ErrStaleToken: a Fence refused a token lower than one it has admitted.
	// The error is a *StaleTokenError.
	ErrStaleToken = errors.New("leaserouter: stale fencing token")
	// ErrDuplicate: Enqueue of an ID the router still knows.
	ErrDuplicate = errors.New("leaserouter: duplicate job ID")
	// ErrNotFound: Cancel of an ID the router does not know.
	ErrNotFound = errors.New("leaserouter: job not found")
	// ErrNoJob: TryAcquire found no job ready.
	ErrNoJob = errors.New("leaserouter: no job ready")
	// ErrClosed: the Router is closed (or closing) and takes no new work.
	ErrClosed = errors.New("leaserouter: router closed")
	// ErrFull: Enqueue would exceed Options.Capacity.
	ErrFull = errors.New("leaserouter: router at capacity")
	// ErrInvalidOptions: a bad Options or WorkerOptions field, nil handler,
	// or a bad argument to KeepAlive or Fence.Do. The message names it.
	ErrInvalidOptions = errors.New("leaserouter: invalid options")
	// ErrInvalidJob: a bad argument to Enqueue (empty ID, bad option).
	ErrInvalidJob = errors.New("leaserouter: invalid job")
	// ErrTokensExhausted: the Router has issued the largest token that fits
	// in an int64 and can grant no more leases; make a new Router with a
	// lower TokenFloor. Unreachable in practice from the default floor.
	ErrTokensExhausted = errors.New("leaserouter: fencing tokens exhausted")
)

// Defaults applied by New to zero Options fields.
const (
	DefaultLeaseDuration = 30 * time.Second
	DefaultMaxAttempts   = 5
	DefaultRetention     = 10 * time.Minute
)

// DefaultBackoff is the Backoff used when Options.Backoff is nil:
// exponential from 1s (attempt 1) doubling per attempt, capped at 5m, with
// "equal jitter" (a random duration in [d/2, d)) so that jobs failing
// together do not retry together (Brooker, "Exponential Backoff And
// Jitter", AWS Architecture Blog, 2015). attempt < 1 is treated as 1.
func DefaultBackoff(attempt int) time.Duration {
	const base, ceiling = time.Second, 5 * time.Minute
	d := ceiling
	if attempt < 1 {
		attempt = 1
	}
	if attempt <= 9 { // 1s<<9 > 5m: past that the cap applies
		d = min(base<<(attempt-1), ceiling)
	}
	return d/2 + rand.N(d/2)
}

// reapBatch bounds the due items one reaper pass settles under the lock
// before it yields, so a mass expiry cannot hold the lock for long.
const reapBatch = 1024

// Options configure a Router. The zero value is valid: every zero field
// gets its default.
type Options struct {
	// LeaseDuration is how long a lease lasts without a heartbeat.
	// Default DefaultLeaseDuration (30s); negative is invalid. Choose it
	// above the worst pause a healthy worker can have between heartbeats
	// (GC, slow calls), not from the average job length.
	LeaseDuration time.Duration
	// MaxAttempts is how many leases a job may be granted before it is dead
	// (StateFailed). Default DefaultMaxAttempts (5); negative or above
	// math.MaxInt32 is invalid.
	// WithMaxAttempts overrides it per job.
	MaxAttempts int
	// Backoff gives the delay before retrying a job after Lease.Fail on
	// the given attempt (1 for the first). Default DefaultBackoff. A
	// result <= 0 retries at once. Fail calls it before taking the
	// router's lock, never under it, so it may call the Router; a slow one
	// slows that Fail only. A panic in it is recovered, counted in
	// Stats.CallbackPanics and reported (see OnEvent), and the attempt
	// uses DefaultBackoff instead.
	Backoff func(attempt int) time.Duration
	// Retention is how long finished jobs stay for Get and dedup. Zero
	// means DefaultRetention (10m); negative means finished jobs are
	// dropped at once.
	Retention time.Duration
	// Capacity is the most unfinished (pending, scheduled, leased) jobs
	// the Router holds; beyond it Enqueue returns ErrFull. Zero means
	// unlimited; negative is invalid.
	Capacity int
	// TokenFloor: every token issued is greater than it. Pass the last
	// token persisted by a previous run if the wall clock may step back
	// between runs. It must be below math.MaxInt64.
	TokenFloor Token
	// OnEvent, if set, receives every event, in the order the transitions
	// happened, from the Router's own delivery goroutine: never under the
	// router's lock and never on the goroutine that made the transition,
	// so what it costs delays events, not the calls that cause them. Calls
	// are serial. It may call back into the Router.
	//
	// Up to 4096 events wait for delivery. Beyond that Enqueue,
	// TryAcquire and Acquire wait until delivery has brought the backlog
	// down to half, so a hook slower than the event rate slows the
	// producers of new work (and bounds the memory events hold: beyond
	// 4096, only the leases already granted add events, one per heartbeat
	// and a few when each ends); lease operations (Heartbeat, Complete,
	// Fail, Release, KeepAlive's and Run's heartbeats) and Cancel never
	// wait, so a worker never loses a lease because hooks are slow (only a
	// refused one, whose lease is already lost, waits like a producer). Calls
	// made from OnEvent itself never wait for room; a goroutine OnEvent
	// waits for must not call Enqueue, TryAcquire or Acquire (with the
	// backlog full, it would wait for OnEvent).
	//
	// A panic in OnEvent (or a runtime.Goexit, as t.FailNow does) is
	// recovered, counted in Stats.CallbackPanics and reported at level
	// Error through Logger (slog.Default() if Logger is nil); delivery goes
	// on with the next event. OnEvent should not call
	// Close; if it does, that Close does not wait for the delivery it is
	// part of. Close returns once every event has been delivered (or its
	// ctx is done).
	OnEvent func(Event)
	// Logger, if set, gets one record per event (message: the event kind;
	// keys: event, job_id, token, attempt, worker_id, err), written by the
	// delivery goroutine after OnEvent's call for the same event, with the
	// same ordering and backlog as OnEvent. A panic in its handler is
	// recovered, counted in Stats.CallbackPanics and reported to
	// slog.Default(). Nil discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.LeaseDuration < 0:
		return o, fmt.Errorf("%w: LeaseDuration is %v, must be > 0 (or 0 for the default %v)", ErrInvalidOptions, o.LeaseDuration, DefaultLeaseDuration)
	case o.MaxAttempts < 0:
		return o, fmt.Errorf("%w: MaxAttempts is %d, must be >= 1 (or 0 for the default %d)", ErrInvalidOptions, o.MaxAttempts, DefaultMaxAttempts)
	case o.Capacity < 0:
		return o, fmt.Errorf("%w: Capacity is %d, must be >= 0 (0 = unlimited)", ErrInvalidOptions, o.Capacity)
	case o.TokenFloor >= maxToken:
		return o, fmt.Errorf("%w: TokenFloor is %d, must be < %d so tokens fit in an int64", ErrInvalidOptions, o.TokenFloor, maxToken)
	case o.MaxAttempts > math.MaxInt32:
		return o, fmt.Errorf("%w: MaxAttempts is %d, must be <= %d", ErrInvalidOptions, o.MaxAttempts, math.MaxInt32)
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Backoff == nil {
		o.Backoff = DefaultBackoff
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	return o, nil
}

// Stats is a point-in-time view of a Router: jobs in each state now, and
// totals since New.
type Stats struct {
	// Jobs in each state now; finished ones count while retained.
	Pending, Scheduled, Leased, Succeeded, Failed, Canceled int
	Enqueued                                                uint64 // jobs accepted by Enqueue
	Duplicates                                              uint64 // Enqueue calls refused with ErrDuplicate
	LeasesGranted                                           uint64 // leases granted (attempts started)
	Heartbeats                                              uint64 // heartbeats accepted
	HeartbeatsRefused                                       uint64 // heartbeats refused because the lease was lost (also counted in StaleRejections)
	Expirations                                             uint64 // leases that expired
	Retries                                                 uint64 // jobs scheduled again by Fail
	Dead                                                    uint64 // jobs that reached StateFailed
	StaleRejections                                         uint64 // lease operations refused because the lease was lost
	Purged                                                  uint64 // finished jobs dropped, at once or after Retention
	CallbackPanics                                          uint64 // panics recovered from Backoff, OnEvent and the Logger's handler
}

type phase uint8

const (
	phaseOpen     phase = iota
	phaseDraining       // Close called: no new work, granted leases may finish
	phaseClosed         // leases revoked, reaper stopped, state frozen
)

// Router routes jobs to workers under expiring leases with fencing tokens.
// Make one with New and stop it with Close. All methods are safe for
// concurrent use. T is the payload type; payloads are stored as given.
//
// A Router guards all its state with one mutex, held only for short,
// non-blocking work: O(log n) heap operations per transition, and never
// user code. One background goroutine, the reaper, makes expiries and
// scheduled jobs visible at their instant; correctness never depends on
// it, because every call first settles what is due. A second, started only
// when Options.OnEvent or Options.Logger is set, delivers events. Its
// memory follows the live jobs: after a burst drains, the ID index and the
// queues shrink (with hysteresis, so a steady load never resizes them back
// and forth).
type Router[T any] struct {
	opts    Options
	epoch   time.Time     // monotonic origin of the int64 times in job
	hooked  bool          // OnEvent or Logger set: record events
	kick    chan struct{} // re-arms the reaper for an earlier deadline; cap 1
	closing chan struct{} // closed when Close starts
	done    chan struct{} // closed when Close has finished
	reaper  sync.WaitGroup

	mu        sync.Mutex
	jobs      *table.Table[job[T]] // by ID
	ready     *heap.Queue[*job[T]] // pending jobs by priority, ready time, seq
	sched     *heap.Heap[*job[T]]  // scheduled jobs by run-at
	leases    *heap.Heap[*job[T]]  // leased jobs by lease expiry
	retHead   *job[T]              // finished jobs by purge time (a FIFO: finish times never decrease)
	retTail   *job[T]
	counts    [numStates + 1]int // by State; the last slot is stateNew's, never read
	stats     Stats              // totals; counts fill the per-state fields on read
	lastToken Token
	seq       uint64
	armed     int64 // the reaper's next wake-up; math.MaxInt64 if none
	waiters   []chan struct{}
	phase     phase
	drained   chan struct{} // closed when the last lease ends while draining
	hooks     *hook.Hooks   // test hooks; nil outside tests

	// Event delivery (event.go), all guarded by mu.
	outbox      []record      // events waiting for the delivery goroutine, in order
	spare       []record      // the last batch's memory, for the next outbox
	inflight    int           // events of the batch in delivery not yet delivered
	deliverIdle bool          // the delivery goroutine waits for deliverKick
	room        chan struct{} // closed when the backlog is down to half; nil unless a producer waits
	deliverer   uint64        // the delivery goroutine's ID, so a hook calling back is recognised
	batch       []record      // the batch in delivery; nil between batches
	// cur is the delivery goroutine's place in batch, written per event by
	// it alone (not guarded). A separate allocation: on a cache line of the
	// Router's, every event delivered would steal the line the callers'
	// next emit writes (measured: about 10% of BenchmarkLifecycleHooked).
	cur *cursor

	deliverKick  chan struct{} // wakes the idle delivery goroutine; cap 1
	deliveryDone chan struct{} // closed when the delivery goroutine ends
}

// New returns a running Router. Zero Options fields get their defaults; a
// bad field returns an error wrapping ErrInvalidOptions that names it. New
// starts the reaper goroutine: call Close to stop it.
func New[T any](opts Options) (*Router[T], error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Router[T]{
		opts:    opts,
		epoch:   time.Now(),
		hooked:  opts.OnEvent != nil || opts.Logger != nil,
		kick:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		jobs:    table.New(jobID[T]),
		ready:   heap.NewQueue(readyBefore[T], setHeapIndex[T]),
		sched:   heap.New(dueBefore[T], setHeapIndex[T]),
		leases:  heap.New(dueBefore[T], setHeapIndex[T]),
		armed:   math.MaxInt64,
	}
	// Seed above the wall clock so a downstream that persisted yesterday's
	// tokens still admits today's (see Token).
	r.lastToken = max(opts.TokenFloor, Token(max(r.epoch.UnixNano(), 0)))
	r.reaper.Go(r.reap)
	if r.hooked {
		r.deliverKick = make(chan struct{}, 1)
		r.deliveryDone = make(chan struct{})
		r.cur = new(cursor)
		go r.deliverLoop() // owned by Close, which waits on deliveryDone
	}
	return r, nil
}

// now is the router's clock: nanoseconds since epoch on the monotonic
// clock, so a wall-clock step can neither expire nor extend a lease.
func (r *Router[T]) now() int64 { return int64(time.Since(r.epoch)) }

func (r *Router[T]) timeAt(ns int64) time.Time { return r.epoch.Add(time.Duration(ns)) }

// addSat adds without overflowing: a huge delay saturates to "never".
func addSat(t int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-t {
		return math.MaxInt64
	}
	return t + int64(d)
}

// Enqueue adds a job with a unique id and its payload. It returns nil once
// the job is stored: pending (ready to lease), or scheduled if WithDelay or
// WithRunAt put its run-at in the future. It returns an error wrapping
// ErrDuplicate if the router still knows id (unfinished, or finished and
// retained), ErrFull beyond Options.Capacity, ErrInvalidJob for an empty id
// or a bad option (naming it), and ErrClosed after Close (or when Close
// starts while it waits); in each case nothing changes. It blocks only on
// the router's lock and, with a hook set, while the event backlog is full
// (see Options.OnEvent). It wakes one blocked Acquire if the job is ready.
func (r *Router[T]) Enqueue(id string, payload T, opts ...EnqueueOption) error {
	if id == "" {
		return fmt.Errorf("%w: empty ID", ErrInvalidJob)
	}
	prio, maxAtt := 0, r.opts.MaxAttempts
	var delay time.Duration
	var runAt time.Time
	timing := optNone
	for _, o := range opts {
		switch o.kind {
		case optPriority:
			prio = o.n
		case optMaxAttempts:
			if o.n < 1 || o.n > math.MaxInt32 {
				return fmt.Errorf("%w: WithMaxAttempts(%d) for job %q, must be in [1, %d]", ErrInvalidJob, o.n, id, math.MaxInt32)
			}
			maxAtt = o.n
		case optDelay:
			if o.d < 0 {
				return fmt.Errorf("%w: WithDelay(%v) for job %q, must be >= 0", ErrInvalidJob, o.d, id)
			}
			timing, delay = optDelay, o.d
		case optRunAt:
			timing, runAt = optRunAt, o.runAt
		}
	}
	hash := r.jobs.Hash(id) // the seed never changes: no lock needed
	r.mu.Lock()
	if r.phase != phaseOpen {
		r.mu.Unlock()
		return ErrClosed
	}
	if err := r.awaitRoom(nil); err != nil {
		r.mu.Unlock()
		return err
	}
	now := r.now()
	r.settle(now, -1)
	known, pos := r.jobs.Find(id, hash)
	if known != nil {
		r.stats.Duplicates++
		if r.hooked {
			// The known job's latest token, as on every event of that job.
			r.emit(EventDuplicate, now, &job[T]{id: id}, nil, known.token, ErrDuplicate)
		}
		r.unlock()
		return fmt.Errorf("%w: %q", ErrDuplicate, id)
	}
	if c := r.opts.Capacity; c > 0 && r.unfinished() >= c {
		r.unlock()
		return fmt.Errorf("%w: %d unfinished jobs", ErrFull, c)
	}
	at := now
	switch timing {
	case optDelay:
		at = addSat(now, delay)
	case optRunAt:
		if !runAt.IsZero() {
			at = max(now, addSat(0, runAt.Sub(r.epoch)))
		}
	}
	r.seq++
	j := &job[T]{
		id: id, payload: payload, priority: prio, maxAtt: int32(maxAtt),
		hash: hash, seq: r.seq, created: now, updated: now, hidx: -1,
	}
	j.state = stateNew
	r.jobs.Insert(j, hash, pos)
	r.stats.Enqueued++
	r.emit(EventEnqueued, now, j, nil, 0, nil)
	r.schedule(j, at, now)
	r.unlock()
	return nil
}

func (r *Router[T]) unfinished() int {
	return r.counts[StatePending] + r.counts[StateScheduled] + r.counts[StateLeased]
}

// TryAcquire leases the ready job that comes first — highest priority, then
// earliest ready time, then enqueue order — to workerID, without blocking.
// It returns ErrNoJob if no job is ready and ErrClosed after Close. It
// does not wait for a job, but with a hook set it waits, as Enqueue does,
// while the event backlog is full (see Options.OnEvent). workerID is
// informational (events, Job.Owner) and may be empty.
func (r *Router[T]) TryAcquire(workerID string) (*Lease[T], error) {
	r.mu.Lock()
	if r.phase != phaseOpen {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	if err := r.awaitRoom(nil); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	now := r.now()
	r.settle(now, -1)
	l, err := r.grant(workerID, now, nil)
	r.unlock()
	return l, err
}

// Acquire leases the next ready job to workerID as TryAcquire does,
// blocking until a job is ready (enqueued, run-at reached, lease expired or
// released). It returns ctx.Err() if ctx is done first — checked before
// each attempt, so a done ctx never gets a job, and a job is never taken and
// dropped — and ErrClosed after Close or when Close starts while it waits.
// Waiters are served in arrival order; a waiter woken for a job it does not
// take (its ctx done meanwhile) passes the wake-up to the next. With a hook
// set it first waits, as Enqueue does, while the event backlog is full (see
// Options.OnEvent), returning ctx.Err() if ctx is done meanwhile. ctx is
// consulted outside the router's lock. A nil ctx means
// context.Background().
func (r *Router[T]) Acquire(ctx context.Context, workerID string) (*Lease[T], error) {
	return r.acquire(ctx, workerID, nil)
}

// acquire is Acquire; a non-nil rl is the memory for Run's Lease,
// allocated before taking the lock.
func (r *Router[T]) acquire(ctx context.Context, workerID string, rl *runLease[T]) (*Lease[T], error) {
	if ctx == nil {
		ctx = context.Background()
	}
	done := ctx.Done()
	woken := false // woken for a job: one we do not take must be passed on
	for {
		// ctx is the caller's code: consulted outside the lock, before each
		// attempt, so a done ctx gets no job; a wake-up for a job we will
		// not take goes to the next waiter.
		if err := ctx.Err(); err != nil {
			if woken {
				r.mu.Lock()
				r.wakeOne()
				r.mu.Unlock()
			}
			return nil, err
		}
		r.mu.Lock()
		if r.phase != phaseOpen {
			r.mu.Unlock()
			return nil, ErrClosed
		}
		if !woken { // a woken waiter passed this already; waiting now could strand its job
			if err := r.awaitRoom(done); err != nil {
				r.mu.Unlock()
				if err == errDone {
					err = ctx.Err()
				}
				return nil, err
			}
		}
		now := r.now()
		r.settle(now, -1)
		if l, err := r.grant(workerID, now, rl); err != ErrNoJob {
			r.unlock()
			return l, err
		}
		w := make(chan struct{}, 1)
		r.waiters = append(r.waiters, w)
		r.unlock()
		woken = false
		select {
		case <-w:
			woken = true
		case <-r.closing:
			return nil, ErrClosed
		case <-done:
			r.mu.Lock()
			if i := slices.Index(r.waiters, w); i >= 0 {
				r.waiters = slices.Delete(r.waiters, i, i+1)
			} else if len(w) > 0 {
				r.wakeOne() // we were woken for a job we will not take: pass it on
			}
			r.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// grant leases the first ready job, or returns ErrNoJob. A non-nil rl
// (Run's, from newRunLease) is used for the Lease. The caller holds r.mu
// and has settled.
func (r *Router[T]) grant(workerID string, now int64, rl *runLease[T]) (*Lease[T], error) {
	j, ok := r.ready.Peek()
	if !ok {
		return nil, ErrNoJob
	}
	if r.lastToken >= maxToken {
		// Every waiter must learn it too (Run's workers stop on it): the
		// wake-up for this job goes on, and each waiter passes it on.
		r.wakeOne()
		return nil, ErrTokensExhausted
	}
	r.ready.Pop()
	readyAt, requeued := j.at, j.ended == endExpired
	r.lastToken++
	r.setState(j, StateLeased)
	j.attempt++
	j.token = r.lastToken
	j.at = addSat(now, r.opts.LeaseDuration)
	j.updated = now
	j.ended = endNone
	r.leases.Push(j)
	r.arm(j.at)
	var l *Lease[T]
	if rl != nil {
		l = &rl.Lease
	} else {
		l = new(Lease[T])
	}
	l.JobID, l.Payload, l.Attempt, l.Token = j.id, j.payload, int(j.attempt), j.token
	l.WorkerID, l.r, l.j, l.granted, l.expiry = workerID, r, j, now, j.at
	if j.progress != nil {
		l.Progress = slices.Clone(j.progress)
	}
	j.lease = l
	r.stats.LeasesGranted++
	if e := r.emit(EventLeaseAcquired, now, j, l, j.token, nil); e != nil {
		e.dur, e.requeued = now-readyAt, requeued
	}
	return l, nil
}

// wakeOne wakes the longest-waiting Acquire, if any. The caller holds r.mu.
func (r *Router[T]) wakeOne() {
	if len(r.waiters) == 0 {
		return
	}
	w := r.waiters[0]
	r.waiters = slices.Delete(r.waiters, 0, 1)
	w <- struct{}{} // cap 1 and sent once: never blocks
}

// Get returns a copy of the job with the given id, after settling what is
// due; ok is false if the router does not know it (never enqueued, or
// purged). The copy shares nothing with the router except a payload of
// reference type. Get works after Close, on the state Close left.
func (r *Router[T]) Get(id string) (j Job[T], ok bool) {
	r.mu.Lock()
	if r.phase != phaseClosed {
		r.settle(r.now(), -1)
	}
	if x := r.jobs.Get(id); x != nil {
		j, ok = r.snapshot(x), true
	}
	r.unlock()
	return j, ok
}

func (r *Router[T]) snapshot(x *job[T]) Job[T] {
	j := Job[T]{
		ID: x.id, Payload: x.payload, State: x.state, Priority: x.priority,
		Attempt: int(x.attempt), MaxAttempts: int(x.maxAtt), Token: x.token,
		Owner: x.owner(), Progress: slices.Clone(x.progress), LastError: x.lastErr,
		CreatedAt: r.timeAt(x.created), UpdatedAt: r.timeAt(x.updated),
	}
	switch x.state {
	case StateLeased:
		j.LeaseExpiry = r.timeAt(x.at)
	case StateScheduled:
		j.RunAt = r.timeAt(x.at)
	}
	return j
}

// Cancel makes a pending, scheduled or leased job StateCanceled; a leased
// job's lease is lost at once (its holder's operations are refused, and
// Run/KeepAlive contexts on it are canceled). Canceling a finished job
// changes nothing and returns nil. It returns an error wrapping ErrNotFound
// for an unknown id (for "" one wrapping both ErrInvalidJob and
// ErrNotFound), and ErrClosed after Close.
func (r *Router[T]) Cancel(id string) error {
	if id == "" {
		return fmt.Errorf("%w: %w: empty ID", ErrInvalidJob, ErrNotFound)
	}
	r.mu.Lock()
	if r.phase != phaseOpen {
		r.mu.Unlock()
		return ErrClosed
	}
	now := r.now()
	r.settle(now, -1)
	j := r.jobs.Get(id)
	if j == nil {
		r.unlock()
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	// The event carries the job's latest token even when it is not leased
	// (an expired lease settled just now): no event of a job carries a
	// token older than its latest lease's.
	switch j.state {
	case StateLeased:
		l := j.lease
		r.endLease(j, endCanceled, true)
		setHeld(r.emit(EventCanceled, now, j, l, l.Token, nil), l.granted, now)
	case StatePending, StateScheduled:
		if j.state == StatePending {
			r.ready.Remove(int(j.hidx))
		} else {
			r.sched.Remove(int(j.hidx))
		}
		r.emit(EventCanceled, now, j, nil, j.token, nil)
	default:
		r.unlock()
		return nil
	}
	r.finish(j, StateCanceled, now)
	r.unlock()
	return nil
}

// Stats returns the counts and totals, after settling what is due. It is
// O(1) and works after Close.
func (r *Router[T]) Stats() Stats {
	r.mu.Lock()
	if r.phase != phaseClosed {
		r.settle(r.now(), -1)
	}
	s := r.stats
	c := r.counts
	r.unlock()
	s.Pending, s.Scheduled, s.Leased = c[StatePending], c[StateScheduled], c[StateLeased]
	s.Succeeded, s.Failed, s.Canceled = c[StateSucceeded], c[StateFailed], c[StateCanceled]
	return s
}

// Close stops the Router. It refuses new work at once (Enqueue, Acquire,
// TryAcquire and Cancel return ErrClosed; blocked Acquires return
// ErrClosed), then waits, until ctx is done, for the leases already granted
// to end (holders may still Heartbeat, Complete, Fail and Release). Leases
// still held then are revoked: their jobs go back to StatePending with the
// attempt counted, their Run and KeepAlive contexts are canceled, and
// their holders' operations are refused with ErrLeaseLost. (So with a
// context that is never done, Close waits for every held lease to end,
// which for an abandoned lease means its expiry.) It then stops the
// reaper, waits until the delivery goroutine has delivered every remaining
// event and ended, and returns: nil, or ctx.Err() if ctx was done first
// (draining or delivery cut short; the delivery goroutine then ends once
// the hook it is in returns and the rest is delivered). Get, Stats and
// Audit keep working on the state left. Calling Close again waits, until
// its own ctx is done, for the first call to finish and for delivery to
// end, and returns nil: Close with a done ctx revokes at once, and a later
// Close(ctx) waits for the last events. Called from OnEvent, Close does all
// of this except wait for the delivery it is part of (or, if Close was
// called before, returns nil at once). A nil ctx means
// context.Background().
func (r *Router[T]) Close(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	r.mu.Lock()
	// Close from an OnEvent hook must not wait for the delivery it is part
	// of: the delivery goroutine goes on once the hook returns.
	fromHook := r.hooked && goid.Current() == r.deliverer
	if r.phase != phaseOpen {
		r.mu.Unlock()
		if !fromHook {
			// Wait for the first call, and for delivery even if the first
			// call's ctx cut it short: Close(done ctx) to revoke at once,
			// then Close(ctx) to wait for the last events.
			r.waitClosed(ctx)
		}
		return nil
	}
	r.phase = phaseDraining
	close(r.closing)
	r.waiters = nil // each waiter sees r.closing
	var err error
	r.settle(r.now(), -1) // a lease past its expiry is not one to drain
	if r.counts[StateLeased] > 0 {
		r.drained = make(chan struct{})
		drained := r.drained
		r.unlock()
		select {
		case <-drained:
		case <-ctx.Done():
			err = ctx.Err()
		}
		r.mu.Lock()
	}
	now := r.now()
	r.settle(now, -1)
	for r.leases.Len() > 0 {
		j := r.leases.At(0)
		l := j.lease
		r.endLease(j, endRevoked, true)
		setHeld(r.emit(EventReleased, now, j, l, l.Token, ErrClosed), l.granted, now)
		r.makeReady(j, now)
	}
	r.phase = phaseClosed
	r.unlock() // wakes the delivery goroutine to deliver the rest and end
	select {
	case r.kick <- struct{}{}:
	default:
	}
	r.reaper.Wait()
	close(r.done)
	if !fromHook && !r.waitClosed(ctx) && err == nil {
		err = ctx.Err()
	}
	return err
}

// waitClosed waits until the first Close has finished and the delivery
// goroutine, if any, has delivered every event and ended, or until ctx is
// done; it reports whether they did.
func (r *Router[T]) waitClosed(ctx context.Context) bool {
	if !r.hooked {
		return waitFor(ctx, r.done)
	}
	return waitFor(ctx, r.done) && waitFor(ctx, r.deliveryDone)
}

// waitFor waits until ch is closed or ctx is done, and reports whether ch
// was closed (preferred when both are).
func waitFor(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// Audit checks every internal invariant of the Router and returns an error
// describing each violation (errors.Join), or nil. It checks the one
// invariant — a job has at most one lease and it is its current one — and
// the bookkeeping behind it: per-state counts, each heap's order and
// membership, lease and token fields, the retention queue's order. It is
// O(n) under the lock: for tests and operators, not for hot paths. It does
// not settle anything and works after Close.
func (r *Router[T]) Audit() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("leaserouter: audit: "+format, args...))
	}
	var counts [numStates]int
	if !r.jobs.Valid() {
		bad("the job index is corrupt")
	}
	for j := range r.jobs.All() {
		id := j.id
		if j.state >= numStates {
			bad("job %q has invalid state %d", id, j.state)
			continue
		}
		counts[j.state]++
		if j.token > r.lastToken {
			bad("job %q has token %d above the last issued %d", id, j.token, r.lastToken)
		}
		if j.attempt > j.maxAtt || j.attempt < 0 {
			bad("job %q has attempt %d of max %d", id, j.attempt, j.maxAtt)
		}
		leased := j.state == StateLeased
		if leased != (j.lease != nil) {
			bad("job %q in state %v has lease %v", id, j.state, j.lease != nil)
		}
		if leased && (j.lease.j != j || j.lease.Token != j.token || j.attempt < 1) {
			bad("job %q's lease does not match it (token %d vs %d)", id, j.lease.Token, j.token)
		}
		i := int(j.hidx)
		var at bool // j is at position i of its state's index
		switch j.state {
		case StatePending:
			at = r.ready.Contains(i) && r.ready.At(i) == j
		case StateScheduled:
			at = i >= 0 && i < r.sched.Len() && r.sched.At(i) == j
		case StateLeased:
			at = i >= 0 && i < r.leases.Len() && r.leases.At(i) == j
		}
		if !j.state.Terminal() {
			if !at {
				bad("job %q in state %v is not at its heap position %d", id, j.state, i)
			}
		} else if j.hidx != -1 {
			bad("finished job %q still has heap position %d", id, j.hidx)
		}
	}
	for s := range numStates {
		if counts[s] != r.counts[s] {
			bad("%v count is %d, but %d jobs are %v", s, r.counts[s], counts[s], s)
		}
	}
	idx := func(j *job[T]) int { return int(j.hidx) }
	if !r.ready.Valid(idx) || !r.sched.Valid(idx) || !r.leases.Valid(idx) {
		bad("a heap is out of order or has stale positions")
	}
	if n := r.ready.Len() + r.sched.Len() + r.leases.Len(); n != r.unfinished() {
		bad("heaps hold %d jobs, but %d are unfinished", n, r.unfinished())
	}
	finished, last := 0, int64(math.MinInt64)
	for j := r.retHead; j != nil; j = j.next {
		finished++
		if !j.state.Terminal() || r.jobs.Get(j.id) != j {
			bad("retention queue holds job %q in state %v", j.id, j.state)
		}
		if j.at < last {
			bad("retention queue out of order at job %q", j.id)
		}
		last = j.at
		if j.next == nil && j != r.retTail {
			bad("retention queue tail is not its last job")
		}
	}
	if want := counts[StateSucceeded] + counts[StateFailed] + counts[StateCanceled]; finished != want {
		bad("retention queue holds %d jobs, but %d are finished", finished, want)
	}
	if r.phase == phaseClosed && r.leases.Len() > 0 {
		bad("%d leases survive Close", r.leases.Len())
	}
	return errors.Join(errs...)
}
