package leaserouter

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/delivery"
	"github.com/leaserouter/leaserouter/internal/heap"
	"github.com/leaserouter/leaserouter/internal/hook"
	"github.com/leaserouter/leaserouter/internal/order"
	"github.com/leaserouter/leaserouter/internal/table"
)

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
// A Router runs up to three goroutines of its own, all ended by Close:
// the reaper, which makes expiries and scheduled jobs visible at their
// instant (correctness never depends on it: every call first settles what
// is due); with Options.OnEvent or Options.Logger set, the goroutine that
// delivers events; and, from the first AddPeriodic on, the scheduler of
// periodic jobs. Memory follows the live jobs: after a burst drains, the
// Router shrinks back.
type Router[T any] struct {
	// One mutex (mu) guards all the state, held only for short,
	// non-blocking work: O(log n) heap operations per transition, bounded
	// growth steps, and never user code. The ID index and the queues grow
	// and shrink in steps of at most a few thousand elements, so no call
	// holds the lock for a resize of everything; they shrink with
	// hysteresis, so a steady load never resizes them back and forth. The
	// scheduler of periodic jobs is periodic_scheduler.go's.
	opts      Options
	epoch     time.Time     // monotonic origin of the int64 times in job
	epochUnix int64         // epoch in Unix nanoseconds (History's minutes)
	hooked    bool          // OnEvent or Logger set: record events
	queue     string        // the queue it serves (DefaultQueue; a Client's queue's name)
	kick      chan struct{} // re-arms the reaper for an earlier deadline; cap 1
	closing   chan struct{} // closed when Close starts
	// closingStarted is set when Close starts, before closing is closed:
	// Run's workers read it before every job (contract.Stopping), an
	// atomic load where a receive from closing costs a call into the
	// runtime.
	closingStarted atomic.Bool
	done           chan struct{} // closed when Close has finished
	reaper         sync.WaitGroup

	mu            sync.Mutex
	jobs          *table.Table[job[T]] // by ID
	ready         *heap.Queue[*job[T]] // pending jobs by priority, ready time, seq
	sched         *heap.Heap[*job[T]]  // scheduled jobs by run-at
	leases        *heap.Queue[*job[T]] // leased jobs by lease expiry: granted and extended in expiry order, so mostly its ring
	retained      *heap.Queue[*job[T]] // finished jobs by purge time: finish times rarely decrease, so mostly its ring; Retry and Delete take one out
	order         *order.Log[job[T]]   // every job, in enqueue order (List)
	paused        bool                 // Pause: no grants until Resume
	counts        [numStates + 1]int   // by State; the last slot is stateNew's, never read
	hist          *history             // History's ring (apart: 2 KB the hot fields need not share lines with)
	stats         Stats                // totals; counts fill the per-state fields on read
	lastToken     Token
	seq           uint64
	armed         int64 // the reaper's next wake-up; math.MaxInt64 if none
	due           int64 // no deadline in leases, sched, retained or kept is before it (settle's fast path; noteDue)
	waiters       []chan struct{}
	woken         int // waiters woken for a job and not back for it yet (Run's share counts them as waiting)
	phase         phase
	drained       chan struct{}              // closed when the last lease ends while draining
	hooks         atomic.Pointer[hook.Hooks] // test signals; nil outside tests (export_test.go sets them)
	cacheWarmSink uint64                     // sink of the loads that warm the caches for a batch (grantInto, completeMany); its value means nothing

	// Event delivery (delivery.go, backlog.go). outbox, room and flush are guarded by mu; the
	// rest of the delivery goroutine's state is in delivery, a separate
	// allocation so that its writes do not steal the cache lines the
	// callers' critical sections use.
	outbox   []record      // events emitted and not yet handed to the delivery goroutine, in order
	room     delivery.Room // the producers of new work that found the backlog full
	pushed   uint64        // events recorded since New (Flush waits for them)
	flush    chan struct{} // closed when flushAt events are delivered; nil unless Flush waits
	flushAt  uint64
	delivery *handoff             // nil without hooks
	growth   growHint             // what the ID index and the ready queue want for their next growth step, and whether Enqueue wants job records (reserve.go)
	recs     []job[T]             // the unused records of the block Enqueue takes them from (reserve.go); guarded by mu
	recBlock *[recordBlock]job[T] // a block of records in reserve, nil when taken; guarded by mu

	// kinds is the names of the kinds by index (job.kind); (*kinds)[0] is
	// "", a Router's jobs. A Client's Register replaces it (copy on
	// write, shared by the Client's queues); the delivery goroutine reads
	// it without r.mu.
	kinds atomic.Pointer[[]string]
	// tokens is a Client's queues' one source of fencing tokens; nil for
	// a lone Router, whose lastToken counts them. With it, lastToken is
	// the last token this Router granted.
	tokens *tokenSource
	// peers is, in a Client, every one of its queues' delivery (its own
	// among them), set before NewClient returns: their hooks are serial
	// (client.go), so a hook calling back must not wait for the delivery
	// of any of them (fromHook). nil for a lone Router.
	peers *[]*handoff
	idle  chan struct{} // closed when no job is unfinished (noteIdle); nil unless a Client's Drained waits; guarded by mu

	periodics *periodics[T] // the scheduler of periodic jobs (periodic.go); nil until the first AddPeriodic; guarded by mu

	lostNotes []lostNote             // lease ends told under mu, their contexts canceled once it is released (tell); guarded by mu
	kept      *heap.Heap[*keeper[T]] // KeepAlive's keepers by the instant of their next heartbeat (heartbeat.go); guarded by mu
}

// New returns a running Router. Zero Options fields get their defaults; a
// bad field returns an error wrapping ErrInvalidOptions that names it. New
// starts the reaper goroutine: call Close to stop it.
func New[T any](opts Options) (*Router[T], error) {
	return newRouter[T](opts, DefaultQueue, nil)
}

// newRouter is New of a Router serving queue, drawing its tokens from
// tokens if not nil (a Client's queues: client.go).
func newRouter[T any](opts Options, queue string, tokens *tokenSource) (*Router[T], error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Router[T]{
		opts:     opts,
		epoch:    time.Now(),
		hooked:   opts.OnEvent != nil || opts.Logger != nil,
		queue:    queue,
		tokens:   tokens,
		kick:     make(chan struct{}, 1),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		jobs:     table.New(jobID[T]),
		ready:    heap.NewQueue(readyBefore[T], setHeapIndex[T]),
		sched:    heap.New(dueBefore[T], setHeapIndex[T]),
		leases:   heap.NewQueue(dueBefore[T], setHeapIndex[T]),
		retained: heap.NewQueue(purgeBefore[T], setHeapIndex[T]),
		kept:     heap.New(keptBefore[T], setKeptIndex[T]),
		order:    order.New(setOrder[T]),
		hist:     new(history),
		armed:    math.MaxInt64,
	}
	r.epochUnix = r.epoch.UnixNano()
	r.kinds.Store(&noKinds)
	r.growth.last = wantRecords // the first Enqueue allocates the first block of records
	r.growth.want.Store(wantRecords)
	// Seed above the wall clock so a downstream that persisted yesterday's
	// tokens still admits today's (see Token).
	r.lastToken = max(opts.TokenFloor, Token(max(r.epoch.UnixNano(), 0)))
	if tokens != nil {
		tokens.seed(r.lastToken)
	}
	r.reaper.Go(r.reap)
	if r.hooked {
		r.delivery = &handoff{kick: make(chan struct{}, 1), done: make(chan struct{})}
		go r.deliverLoop() // owned by Close, which waits on delivery.done
	}
	return r, nil
}

// noKinds is a Router's kinds: its jobs have kind "".
var noKinds = []string{""}

// kindName is the name of kind k.
func (r *Router[T]) kindName(k uint16) string {
	if k == 0 {
		return ""
	}
	return (*r.kinds.Load())[k]
}

// lockOpen begins a call that needs the Router open (Enqueue,
// TryAcquire, Acquire, Cancel): it takes r.mu and settles what is due at
// the current instant, the "no hidden timing" rule said once for every
// call. With room it first waits while the event backlog is full
// (awaitRoom; done cuts that short). It returns the instant with r.mu held,
// or, with r.mu released, ErrClosed or errDone.
func (r *Router[T]) lockOpen(room bool, done <-chan struct{}) (now int64, err error) {
	r.lock()
	if r.phase != phaseOpen {
		r.unlockAndDeliver()
		return 0, ErrClosed
	}
	if room && r.backlogFull() { // inlined: the common call has no hook, or room
		if err := r.awaitRoom(done); err != nil {
			r.unlockAndDeliver()
			return 0, err
		}
	}
	now = r.settleNow()
	if r.phase != phaseOpen { // Close began while settleNow released the lock
		r.unlockAndDeliver()
		return 0, ErrClosed
	}
	return now, nil
}

// settleNow reads the clock and settles what is due at that instant,
// unless the Router is closed (its state is then frozen), and returns the
// instant. The caller holds r.mu, which settleNow may release and take
// again (so the caller must rely on nothing it read before): when more
// than reapBatch items are due — a mass expiry the reaper has not caught
// up with — it settles them a batch per hold of the lock, as the reaper
// does, earliest first, then reads the clock again, so that no call holds
// the lock for all of them.
func (r *Router[T]) settleNow() int64 {
	for {
		now := r.now()
		if r.phase == phaseClosed || now < r.due || !r.settle(now, reapBatch) { // now < r.due: settle's fast path, without the call
			return now
		}
		r.unlockAndDeliver()
		runtime.Gosched()
		r.lock()
	}
}

// lockSettled takes r.mu for a call that works after Close too (Get,
// List, Leases) and settles what is due, as lockOpen does.
func (r *Router[T]) lockSettled() {
	r.lock()
	r.settleNow()
}

// lock takes r.mu for a call, and then tells the Locked test signal, if a
// test set one, that it holds it: the job calls, lease operations,
// admin reads and KeepAlive beats take the lock through here, so the
// lock-hold tests see their holds. Stats, History, Pause/Resume, the
// periodic calls, Run's batch holds, watch and unkeep take r.mu directly
// (the lock-hold tests see those holds end, through Unlocking, not
// begin). Nothing here decides anything on the signal.
func (r *Router[T]) lock() {
	r.mu.Lock()
	if h := r.hooks.Load(); h != nil && h.Locked != nil {
		h.Locked()
	}
}

// now is the router's clock: nanoseconds since epoch on the monotonic
// clock, so a wall-clock step can neither expire nor extend a lease.
func (r *Router[T]) now() int64 { return int64(time.Since(r.epoch)) }

func (r *Router[T]) timeAt(nanos int64) time.Time { return r.epoch.Add(time.Duration(nanos)) }

// Enqueue adds a job with a unique id and its payload. It returns nil once
// the job is stored: pending (ready to lease), or scheduled if WithDelay or
// WithRunAt put its run-at in the future. It returns an error wrapping
// ErrDuplicate if the router still knows id (unfinished, or finished and
// retained), ErrFull beyond Options.Capacity, ErrInvalidJob for an id
// ValidateID refuses (empty, invalid UTF-8, NUL, over MaxIDBytes) or a bad
// option (naming the problem), and ErrClosed after Close (or when Close
// starts while it waits); in each case nothing changes. It blocks only on
// the router's lock and, with a hook set, while the event backlog is full
// (see Options.OnEvent). It wakes one blocked Acquire if the job is ready.
func (r *Router[T]) Enqueue(id string, payload T, opts ...EnqueueOption) error {
	return r.enqueue(id, payload, 0, opts, nil)
}

// enqueue is Enqueue of a job of kind (a Client's Kind; 0 for a Router's
// Enqueue), waiting for room in the event backlog until done is closed
// (then it returns errDone; nil: no limit).
func (r *Router[T]) enqueue(id string, payload T, kind uint16, opts []EnqueueOption, done <-chan struct{}) error {
	var spec enqueueSpec
	if err := r.parseJob(&spec, id, opts); err != nil {
		return err
	}
	spec.kind = kind
	grow := r.prealloc() // before the lock, with Enqueue's job records (reserve.go)
	var own *job[T]
	if spec.Metadata != nil {
		own = new(job[T]) // a record of its own: see ownRecords (batch.go)
	}
	now, err := r.lockOpen(true, done)
	if err != nil {
		return err
	}
	r.stock(grow)
	known, pos := r.jobs.Find(id, spec.hash)
	if known != nil {
		r.duplicate(id, spec.kind, known, now)
		r.unlockAndDeliver()
		return fmt.Errorf("%w: %q", ErrDuplicate, id)
	}
	if c := r.opts.Capacity; c > 0 && r.unfinished() >= c {
		r.unlockAndDeliver()
		return fmt.Errorf("%w: %d unfinished jobs", ErrFull, c)
	}
	if own == nil {
		own = r.newRecord()
	}
	r.insert(id, payload, &spec, pos, now, own)
	r.noteWants()
	r.unlockAndDeliver()
	return nil
}

// duplicate counts and reports an Enqueue of id refused because the router
// knows it (known; for an ID repeated within a batch, the job the batch
// just enqueued). The caller holds r.mu.
func (r *Router[T]) duplicate(id string, kind uint16, known *job[T], now int64) {
	r.stats.Duplicates++
	if r.hooked {
		// The known job's latest token, as on every event of that job.
		r.emit(EventDuplicate, now, &job[T]{id: id, kind: kind}, nil, known.token, ErrDuplicate)
	}
}

func (r *Router[T]) unfinished() int {
	return r.counts[StatePending] + r.counts[StateScheduled] + r.counts[StateLeased]
}

// TryAcquire leases the ready job that comes first — highest priority, then
// earliest ready time, then enqueue order — to workerID, without blocking.
// It returns ErrNoJob if no job is ready and ErrClosed after Close. It
// does not wait for a job, but with a hook set it waits, as Enqueue does,
// while the event backlog is full (see Options.OnEvent). workerID is
// informational (events, Job.Owner) and may be empty; one that breaks
// the rule for IDs (see MaxIDBytes) is an error wrapping
// ErrInvalidOptions.
func (r *Router[T]) TryAcquire(workerID string) (*Lease[T], error) {
	if err := contract.ValidateWorkerID(ErrInvalidOptions, workerID); err != nil {
		return nil, err
	}
	l := new(Lease[T]) // before the lock (reserve.go); garbage if no job is ready
	now, err := r.lockOpen(true, nil)
	if err != nil {
		return nil, err
	}
	l, err = r.grant(workerID, now, l, nil)
	r.unlockAndDeliver()
	if l != nil {
		l.ownProgress()
	}
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
// context.Background(). A workerID that breaks the rule for IDs (see
// MaxIDBytes; "" is allowed) is an error wrapping ErrInvalidOptions, at
// once.
func (r *Router[T]) Acquire(ctx context.Context, workerID string) (*Lease[T], error) {
	if err := contract.ValidateWorkerID(ErrInvalidOptions, workerID); err != nil {
		return nil, err
	}
	var l *Lease[T]
	fresh := new(Lease[T]) // before the lock (reserve.go); filled only when granted
	err := r.await(ctx, func(now int64) (err error) {
		l, err = r.grant(workerID, now, fresh, nil)
		return err
	})
	if l != nil {
		l.ownProgress()
	}
	return l, err
}

// await is the loop of Acquire and AcquireMany: it calls take, with r.mu
// held and what is due settled at now, until take returns something other
// than ErrNoJob, waiting between tries for a wake-up (a job made ready),
// ctx or Close. It returns take's error, ctx.Err() or ErrClosed.
func (r *Router[T]) await(ctx context.Context, take func(now int64) error) error {
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
				r.woken--
				r.wakeOne()
				r.unlockAndDeliver()
			}
			return err
		}
		// A woken waiter passed the room check already; waiting now could
		// strand its job.
		now, err := r.lockOpen(!woken, done)
		if err != nil {
			if err == errDone {
				err = ctx.Err()
			}
			return err
		}
		if woken {
			r.woken-- // back for the job it was woken for
		}
		if err := take(now); err != ErrNoJob {
			r.unlockAndDeliver()
			return err
		}
		w := make(chan struct{}, 1)
		r.waiters = append(r.waiters, w)
		r.unlockAndDeliver()
		woken = false
		select {
		case <-w:
			woken = true
		case <-r.closing:
			return ErrClosed
		case <-done:
			r.mu.Lock()
			if i := slices.Index(r.waiters, w); i >= 0 {
				r.waiters = slices.Delete(r.waiters, i, i+1)
			} else if len(w) > 0 {
				r.woken--
				r.wakeOne() // we were woken for a job we will not take: pass it on
			}
			r.unlockAndDeliver()
			return ctx.Err()
		}
	}
}

// wakeOne wakes the longest-waiting Acquire, if any. The caller holds r.mu.
func (r *Router[T]) wakeOne() {
	if len(r.waiters) == 0 {
		return
	}
	w := r.waiters[0]
	r.waiters = slices.Delete(r.waiters, 0, 1)
	r.woken++
	w <- struct{}{} // cap 1 and sent once: never blocks
}

// Get returns a copy of the job with the given id, after settling what is
// due; ok is false if the router does not know it (never enqueued,
// purged, or an id ValidateID refuses: Get returns at once). The copy
// shares nothing with the router except a payload of reference type. Get
// works after Close, on the state Close left.
func (r *Router[T]) Get(id string) (j Job[T], ok bool) {
	if ValidateID(id) != nil {
		return j, false
	}
	var w jobRow
	var p T
	r.lockSettled()
	if x := r.jobs.Get(id); x != nil {
		w, p, ok = r.row(x, true), x.payload, true
	}
	r.unlockAndDeliver()
	if ok {
		j = withPayload(&w, p) // the checkpoint's copy, outside the lock
	}
	return j, ok
}

// Cancel makes a pending, scheduled or leased job StateCanceled; a leased
// job's lease is lost at once (its holder's operations are refused, and
// Run/KeepAlive contexts on it are canceled). Canceling a finished job
// changes nothing and returns nil. It returns an error wrapping ErrNotFound
// for an unknown id (for an id ValidateID refuses, "" included, one
// wrapping ErrInvalidJob too, naming the problem), and ErrClosed after Close.
func (r *Router[T]) Cancel(id string) error {
	if err := contract.CheckJobID(ErrInvalidJob, ErrNotFound, id); err != nil {
		return err
	}
	now, err := r.lockOpen(false, nil)
	if err != nil {
		return err
	}
	j := r.jobs.Get(id)
	if j == nil {
		r.unlockAndDeliver()
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if j.state.Terminal() {
		r.unlockAndDeliver()
		return nil
	}
	r.cancel(j, now)
	r.unlockAndDeliver()
	return nil
}
