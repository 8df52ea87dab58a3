package leaserouter

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// Run: worker goroutines that acquire, run a Handler under a context
// canceled when the lease is lost, and complete, fail or release each job.
// The workers' loop is worker.go, heartbeat scheduling heartbeat.go.
//
// SAME RULE on every backend, written once in internal/contract
// (worker.go) and pinned by internal/routertest's workers rows:
// WorkerOptions' checks and defaults (contract.WorkerDefaults, given
// its fields), MaxWorkers, DefaultBatch and MaxBatch.
//
// TUNED to this backend: leaseCtx, the handler's context made only when
// the handler looks at it, in a block of leases shared by batches (take).
// Here a job costs one share of a lock hold, not a round trip, so a
// context and its registration with the parent per job would be much of
// its cost (BenchmarkRun); pgrouter makes one per job.

// Handler processes one leased job. Its ctx is canceled as soon as the lease
// is lost (expired, canceled, revoked by Close) or Run's ctx is done; then
// context.Cause(ctx) wraps ErrLeaseLost (or is Run's cause). It is also
// canceled at the attempt's timeout, if it has one (WorkerOptions.Timeout,
// WithTimeout): then ctx.Err() is context.DeadlineExceeded, the cause a
// *TimeoutError, and the lease is still valid (Run heartbeats it until the
// handler returns). A handler should stop work when ctx is done and write
// downstream only through a Fence with l.Token. It may call
// l.Heartbeat(progress) to record a checkpoint; Run heartbeats in the
// background anyway. Returning nil completes the job, an error fails the
// attempt (wrap it with Permanent to fail the job for good), Snooze(d)
// (even wrapped) snoozes the job without counting the attempt (see
// Lease.Snooze), and a panic is recovered and fails the attempt with the
// panic value and stack in Job.LastError. Run calls Complete, Fail or
// Snooze itself: the handler must not (if it does, Run's own end is
// refused and counted as a stale rejection, whether or not a KeepAlive
// also keeps the lease, and that end of the handler's does not cancel its
// ctx).
type Handler[T any] func(ctx context.Context, l *Lease[T]) error

// MaxWorkers is the most worker goroutines one Run starts
// (WorkerOptions.Workers); more is refused with ErrInvalidOptions rather
// than risking the process's memory. Several Runs may share a Router.
const MaxWorkers = 1 << 16 // 65,536

// DefaultBatch is the default of WorkerOptions.Batch, and MaxBatch the
// largest Batch allowed.
const (
	DefaultBatch = 256
	MaxBatch     = 1024
)

// WorkerOptions configure Run. The zero value is valid.
type WorkerOptions struct {
	// Workers is the number of worker goroutines. Default
	// runtime.GOMAXPROCS(0); negative or above MaxWorkers is invalid.
	Workers int
	// WorkerID is the prefix of worker IDs: worker i is "<WorkerID>-<i>".
	// Default "<hostname>-<pid>". Each worker ID must keep the rule for
	// IDs (valid UTF-8, no NUL, at most MaxIDBytes bytes with its
	// suffix), or Run returns an error wrapping
	// ErrInvalidOptions.
	WorkerID string
	// HeartbeatInterval is how often a running job's lease is extended.
	// Default LeaseDuration/3; negative, or >= LeaseDuration (the lease
	// would expire between heartbeats), is invalid; a positive value below
	// MinHeartbeatInterval is raised to it (see there). Keep it well below
	// LeaseDuration so a late heartbeat or two do not lose the lease. It
	// also bounds how long a job leased in a batch waits for its turn (see
	// Run).
	HeartbeatInterval time.Duration
	// Batch is the most jobs one worker leases at once, so that when the
	// backlog is deep and jobs are short the router's lock is taken once
	// per batch rather than once per job. Default DefaultBatch (256); 1
	// leases one job at a time; negative or above MaxBatch is invalid. It
	// is a ceiling, not a size: a worker leases one job at a time until
	// its jobs prove short, so the default is safe for long jobs (see
	// Run).
	Batch int
	// Timeout limits each attempt: the handler's ctx is canceled Timeout
	// after the handler starts, with a cause wrapping
	// context.DeadlineExceeded (a *TimeoutError); the handler's error then
	// fails the attempt as any error does (retried after Backoff), and its
	// nil completes the job. The lease is heartbeated until the handler
	// returns: a timeout is not a lost lease. A job's WithTimeout overrides
	// it. Default 0: no limit; negative is invalid. Per-attempt timeouts as
	// in River (JobTimeout) and asynq (Timeout).
	Timeout time.Duration
}

// Run processes jobs with opts.Workers worker goroutines until ctx is done
// or the Router is closed. Each worker leases a job, runs h with a context
// canceled when the lease is lost, heartbeats the lease every
// opts.HeartbeatInterval while h runs, and then completes the job if h
// returned nil, or fails the attempt if h returned an error or panicked
// (releases the job if ctx was done meanwhile). Heartbeats go on until h
// returns, even after ctx is done, so a handler winding down keeps its
// lease. If the lease was lost while h ran, Run leaves the job alone.
//
// When jobs are short and many are ready, a worker leases up to
// opts.Batch jobs at once, runs them in order, and completes the
// successful ones with its next lease. A batch lasts at most one
// HeartbeatInterval: the jobs it has not started by then, or when ctx is
// done or Close starts, are handed back unstarted (pending again in their
// old place, the attempt not counted: EventReleased), so a job leased
// ahead never loses its lease while it waits.
//
// Run blocks until every handler it started has returned. It returns nil
// when stopped by ctx or Close; ErrClosed if the Router is closed; an
// error wrapping ErrTokensExhausted when the Router can grant no more
// leases (running handlers finish, the jobs left stay pending); and,
// starting nothing, an error wrapping ErrInvalidOptions for bad opts or a
// nil h. Several Runs may share a Router. A nil ctx means
// context.Background().
func (r *Router[T]) Run(ctx context.Context, opts WorkerOptions, h Handler[T]) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := contract.WorkerDefaults(ErrInvalidOptions, h == nil, r.opts.LeaseDuration,
		&opts.Workers, &opts.WorkerID, &opts.HeartbeatInterval, &opts.Batch, opts.Timeout); err != nil {
		return err
	}
	select {
	case <-r.closing:
		return ErrClosed
	default:
	}
	// How a worker sizes its batches (worker.go): one job at first and
	// after any batch that was cut, twice as many as the last time (up to
	// Batch) after a batch that finished within a quarter of
	// HeartbeatInterval, half as many after one that took over half of
	// it; and never more than its share of the ready jobs with the
	// callers blocked in Acquire or AcquireMany at that moment (other
	// workers, other Runs; at least one), so no worker takes the jobs
	// another is waiting for. A worker waiting for the router's lock
	// between batches yields the processor rather than blocking at once;
	// one whose last batch came up short (a shallow backlog) yields a
	// little before its next, and one that found nothing ready yields a
	// little and looks again before it blocks, so that producers get in,
	// batches stay large and a producer rarely pays for waking a worker.
	//
	// The first heartbeat of a batch is due HeartbeatInterval after it
	// was leased, so a batch shorter than that costs no heartbeat, no
	// timer and no goroutine: one heartbeat goroutine per Run serves
	// every worker, sleeping until the earliest heartbeat due. The
	// context.Context behind the handler's ctx is made only if the
	// handler calls its Done or Value (Err answers without it). The
	// Leases, with their handler contexts, come in blocks of up to
	// maxShared, allocated outside the router's lock (worker.take).
	u := &runner[T]{
		r: r, h: h, interval: opts.HeartbeatInterval, batch: opts.Batch, timeout: opts.Timeout,
		slots: make([]slot[T], opts.Workers), kick: make(chan struct{}, 1),
	}
	// A worker that can get no more leases ends its loop; the error is
	// Run's once every worker has.
	var exhausted atomic.Pointer[error]
	u.wake.Store(math.MaxInt64)
	stop := make(chan struct{})
	var beats, workers sync.WaitGroup
	beats.Go(func() { u.heartbeats(ctx, stop) })
	for i := range opts.Workers {
		w := &worker[T]{u: u, s: &u.slots[i], id: fmt.Sprintf("%s-%d", opts.WorkerID, i), size: 1}
		workers.Go(func() {
			if err := w.work(ctx); err != nil {
				exhausted.CompareAndSwap(nil, &err)
			}
		})
	}
	workers.Wait()
	close(stop)
	beats.Wait()
	if err := exhausted.Load(); err != nil {
		return fmt.Errorf("leaserouter: Run stopped with jobs left: %w", *err)
	}
	return nil
}

// runner is one Run: its workers' slots and the heartbeat goroutine that
// serves them.
type runner[T any] struct {
	r        *Router[T]
	h        Handler[T]
	interval time.Duration
	batch    int           // WorkerOptions.Batch
	timeout  time.Duration // WorkerOptions.Timeout
	slots    []slot[T]     // one per worker
	// wake is when the heartbeat goroutine next scans the slots
	// (math.MaxInt64: only when kicked). A worker whose heartbeat is due
	// earlier kicks it.
	wake atomic.Int64
	kick chan struct{} // cap 1
}

// leaseCtx is the context Run gives a handler: canceled when the lease is
// lost, when Run's context is done, or when the handler has returned. The
// context.Context behind it is made on first use (Done, Value, or Err
// after a cancellation), so a handler that never looks at its context
// costs no context at all; until then Err answers from the cause and the
// parent. The Value of a made context is what makes context.Cause and
// derived contexts work as for any context.WithCancelCause. It is kept
// small, three words: there is one per job (in a block of leases, garbage
// once every lease of the block is), and what it knows beyond its parent
// is in a ctxState it points to, shared by every context that ends the
// common way (see stop).
type leaseCtx struct {
	parent *context.Context // the worker's ctx (one per worker, not per job: see worker.ctx); set before the lease is granted

	mu sync.Mutex               // held to change st
	st atomic.Pointer[ctxState] // nil while live and not made; read without mu by live
}

// ctxState is what a leaseCtx knows once it is made or stopped. It is
// never written once stored: a change stores another, under the
// leaseCtx's mu, so live reads it without the lock. One that is not made
// may be shared (stoppedLive, stoppedParentDone).
type ctxState struct {
	ctx        context.Context // nil until made
	cancel     context.CancelCauseFunc
	cause      error // the first cause stop was given; nil while live
	parentDone bool  // the parent was done when stop came before the context was made
}

// The states of a context stopped with context.Canceled (its handler
// returned) before it was made: nearly every one Run gives.
var (
	stoppedLive       = &ctxState{cause: context.Canceled}
	stoppedParentDone = &ctxState{cause: context.Canceled, parentDone: true}
)

// ctx returns the context behind c, making it if needed.
func (c *leaseCtx) ctx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st.Load()
	if st == nil || st.ctx == nil {
		var made ctxState
		if st != nil {
			made.cause, made.parentDone = st.cause, st.parentDone
		}
		p := *c.parent
		if made.cause != nil && !made.parentDone {
			// Stopped while the parent was live: that cause came first and
			// must stay the context's, whatever the parent did since.
			p = context.WithoutCancel(p)
		}
		made.ctx, made.cancel = context.WithCancelCause(p)
		if made.cause != nil {
			made.cancel(made.cause)
		}
		st = &made
		c.st.Store(st)
	}
	return st.ctx
}

// stop cancels c with cause unless it was stopped before, and returns the
// first cause it was stopped with.
func (c *leaseCtx) stop(cause error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch st := c.st.Load(); {
	case st != nil && st.cause != nil: // stopped before
	case st != nil: // made
		c.st.Store(&ctxState{ctx: st.ctx, cancel: st.cancel, cause: cause, parentDone: st.parentDone})
		st.cancel(cause)
	default:
		c.st.Store(&ctxState{cause: cause, parentDone: (*c.parent).Err() != nil}) // was the parent done first?
	}
	return c.st.Load().cause
}

// returned is stop(context.Canceled), the handler having returned, with
// no allocation unless the context was made: it returns the cause c was
// stopped with before, nil if none.
//
// It unlocks without a defer (it runs once per job Run runs): nothing
// between its Lock and Unlock can panic (a context's cancel and Err call
// no user code).
func (c *leaseCtx) returned() (earlier error) {
	c.mu.Lock()
	switch st := c.st.Load(); {
	case st != nil && st.cause != nil:
		earlier = st.cause
	case st != nil: // made
		c.st.Store(&ctxState{ctx: st.ctx, cancel: st.cancel, cause: context.Canceled, parentDone: st.parentDone})
		st.cancel(context.Canceled)
	case (*c.parent).Err() != nil: // the parent was done first
		c.st.Store(stoppedParentDone)
	default:
		c.st.Store(stoppedLive)
	}
	c.mu.Unlock()
	return earlier
}

// live reports whether c has not been stopped: the lease is not lost and
// the handler has not returned. It takes no lock (see ctxState).
func (c *leaseCtx) live() bool {
	st := c.st.Load()
	return st == nil || st.cause == nil
}

// Deadline is the parent's: a lease's end is not known in advance.
func (c *leaseCtx) Deadline() (time.Time, bool) { return (*c.parent).Deadline() }

// Done makes the context and returns its channel.
func (c *leaseCtx) Done() <-chan struct{} { return c.ctx().Done() }

// Value makes the context and asks it, so that context.Cause finds it.
func (c *leaseCtx) Value(key any) any { return c.ctx().Value(key) }

// Err answers without making the context when it can.
func (c *leaseCtx) Err() error {
	c.mu.Lock()
	st := c.st.Load()
	var made context.Context
	if st != nil {
		made = st.ctx
	}
	c.mu.Unlock()
	switch {
	case made != nil:
		return made.Err()
	case st == nil:
		return (*c.parent).Err()
	case st.parentDone:
		return (*c.parent).Err() // the parent was done first, as the made context will say (a done context's Err never changes)
	case st.cause != nil:
		return context.Canceled
	}
	return (*c.parent).Err()
}

// leaseLost stops c with the loss (lostWatcher).
func (c *leaseCtx) leaseLost(cause error) { c.stop(cause) }

// String names the context as the context package names its own.
func (c *leaseCtx) String() string { return fmt.Sprint(*c.parent) + ".WithCancel(leaserouter lease)" }
