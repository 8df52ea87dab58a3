package leaserouter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Run: worker goroutines that acquire, run a Handler under a context
// canceled when the lease is lost, and complete, fail or release each job.
// Heartbeat scheduling lives in heartbeat.go.

// Handler processes one leased job. Its ctx is canceled as soon as the lease
// is lost (expired, canceled, revoked by Close) or Run's ctx is done; then
// context.Cause(ctx) wraps ErrLeaseLost (or is Run's cause). A handler should
// stop work when ctx is done and write downstream only through a Fence with
// l.Token. It may call l.Heartbeat(progress) to record a checkpoint; Run
// heartbeats in the background anyway. Returning nil completes the job, an
// error fails the attempt (wrap it with Permanent to fail the job for good),
// and a panic is recovered and fails the attempt with the panic value and
// stack in Job.LastError. Run calls Complete or Fail itself: the handler
// must not.
type Handler[T any] func(ctx context.Context, l *Lease[T]) error

// MaxWorkers is the most worker goroutines one Run starts
// (WorkerOptions.Workers); more is refused with ErrInvalidOptions rather
// than risking the process's memory. Several Runs may share a Router.
const MaxWorkers = 1 << 16

// WorkerOptions configure Run. The zero value is valid.
type WorkerOptions struct {
	// Workers is the number of worker goroutines. Default
	// runtime.GOMAXPROCS(0); negative or above MaxWorkers is invalid.
	Workers int
	// WorkerID is the prefix of worker IDs: worker i is "<WorkerID>-<i>".
	// Default "<hostname>-<pid>".
	WorkerID string
	// HeartbeatInterval is how often a running job's lease is extended.
	// Default LeaseDuration/3; negative, or >= LeaseDuration (the lease
	// would expire between heartbeats), is invalid; a positive value below
	// MinHeartbeatInterval is raised to it (see there). Keep it well below
	// LeaseDuration so a late heartbeat or two do not lose the lease.
	HeartbeatInterval time.Duration
}

func (o WorkerOptions) withDefaults(lease time.Duration) (WorkerOptions, error) {
	switch {
	case o.Workers < 0 || o.Workers > MaxWorkers:
		return o, fmt.Errorf("%w: WorkerOptions.Workers is %d, must be in [0, %d] (0 = GOMAXPROCS)", ErrInvalidOptions, o.Workers, MaxWorkers)
	case o.HeartbeatInterval < 0:
		return o, fmt.Errorf("%w: WorkerOptions.HeartbeatInterval is %v, must be >= 0 (0 = LeaseDuration/3)", ErrInvalidOptions, o.HeartbeatInterval)
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.WorkerID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		o.WorkerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	o.HeartbeatInterval = heartbeatInterval(o.HeartbeatInterval, lease)
	if o.HeartbeatInterval >= lease { // checked after defaulting: LeaseDuration/3 of 1ns is no interval
		return o, fmt.Errorf("%w: WorkerOptions.HeartbeatInterval %v must be < LeaseDuration %v", ErrInvalidOptions, o.HeartbeatInterval, lease)
	}
	return o, nil
}

// Run processes jobs with opts.Workers worker goroutines until ctx is done
// or the Router is closed. Each worker acquires a job, runs h with a context
// canceled as soon as the lease is lost or its expiry passes, heartbeats
// every opts.HeartbeatInterval in the background while h runs, and then
// completes the job (h returned nil), fails it (h returned an error or
// panicked) — or, when ctx was done meanwhile, completes it if h returned
// nil and releases it otherwise. Heartbeats go on until h returns, even
// after ctx is done, so a handler winding down keeps its lease (Close
// revokes the leases still held when its own ctx is done). If the lease
// was lost while h ran, Run leaves the job alone: its new state was
// decided by whoever ended the lease.
//
// The first heartbeat of a job is due HeartbeatInterval after its lease
// was granted, so a job shorter than that costs no heartbeat, no timer and
// no goroutine: one heartbeat goroutine per Run serves every worker's
// lease, sleeping until the earliest heartbeat due. The context.Context
// behind the handler's ctx is made only if the handler calls its Done or
// Value (Err answers without it). A worker that completes a job takes its
// next one in the same step, under one lock.
//
// Run blocks until every handler it started has returned and every
// goroutine it started has ended. It returns nil when stopped by ctx or
// Close; ErrClosed at once if the Router was already closed; an error
// wrapping ErrTokensExhausted when the Router can grant no more leases
// (each worker stops at its next acquire, so running handlers finish, and
// the jobs left stay pending); and at once, starting nothing, an error
// wrapping ErrInvalidOptions for bad opts (Workers above MaxWorkers among
// them) or a nil h. Several Runs may share a Router. A nil ctx means
// context.Background().
func (r *Router[T]) Run(ctx context.Context, opts WorkerOptions, h Handler[T]) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if h == nil {
		return fmt.Errorf("%w: nil Handler", ErrInvalidOptions)
	}
	opts, err := opts.withDefaults(r.opts.LeaseDuration)
	if err != nil {
		return err
	}
	select {
	case <-r.closing:
		return ErrClosed
	default:
	}
	u := &runner[T]{
		r: r, h: h, interval: opts.HeartbeatInterval,
		slots: make([]slot[T], opts.Workers), kick: make(chan struct{}, 1),
	}
	// A worker that can get no more leases ends its loop; the error is
	// Run's once every worker has.
	var exhausted atomic.Pointer[error]
	u.wake.Store(math.MaxInt64)
	stop := make(chan struct{})
	var beats, workers sync.WaitGroup
	beats.Go(func() { u.heartbeats(stop) })
	for i := range opts.Workers {
		id := fmt.Sprintf("%s-%d", opts.WorkerID, i)
		workers.Go(func() {
			if err := u.work(ctx, &u.slots[i], id); err != nil {
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
	slots    []slot[T] // one per worker
	// wake is when the heartbeat goroutine next scans the slots
	// (math.MaxInt64: only when kicked). A worker whose heartbeat is due
	// earlier kicks it.
	wake atomic.Int64
	kick chan struct{} // cap 1
}

// slot is what one worker is running, for the heartbeat goroutine.
type slot[T any] struct {
	mu  sync.Mutex   // held by the heartbeat goroutine while it beats, so clearing l waits for a beat in flight
	l   *runLease[T] // nil between jobs
	due int64        // l's next heartbeat on the router's clock; math.MaxInt64 once it must not beat
	_   [40]byte     // keep workers' slots on separate cache lines
}

// work is one worker loop of Run. It returns nil when ctx is done or the
// Router closed, and the error when it can get no more leases
// (ErrTokensExhausted).
func (u *runner[T]) work(ctx context.Context, s *slot[T], id string) error {
	// A context of the worker's own as the handlers' parent, so that making
	// one (it registers with its parent) contends with no other worker.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var rl *runLease[T]
	for {
		if rl == nil {
			rl = newRunLease[T](ctx)
			if _, err := u.r.acquire(ctx, id, &rl.Lease); err != nil {
				if errors.Is(err, ErrTokensExhausted) {
					return err
				}
				return nil // ctx done or Router closed
			}
		}
		rl = u.process(ctx, s, rl, id)
	}
}

// runLease is a Lease granted to Run, allocated with its handler context,
// which watches the lease from the start (so a loss right after the grant
// already cancels it): one allocation per job.
type runLease[T any] struct {
	Lease[T]
	hc leaseCtx
}

// newRunLease allocates a Lease for Run with its handler context, whose
// parent is ctx.
func newRunLease[T any](ctx context.Context) *runLease[T] {
	rl := new(runLease[T])
	rl.hc.parent = ctx
	rl.lost = &rl.hc
	return rl
}

// process runs the handler on rl and ends the lease as Run documents. It
// returns the worker's next lease if it took one while completing rl.
func (u *runner[T]) process(ctx context.Context, s *slot[T], rl *runLease[T], id string) *runLease[T] {
	l := &rl.Lease
	due := addSat(l.granted, u.interval)
	s.mu.Lock()
	s.l, s.due = rl, due
	s.mu.Unlock()
	if due < u.wake.Load() {
		select {
		case u.kick <- struct{}{}:
		default:
		}
	}
	err := call(&rl.hc, l, u.h)
	s.mu.Lock()
	s.l = nil
	s.mu.Unlock()
	if errors.Is(rl.hc.stop(context.Canceled), ErrLeaseLost) {
		// The lease was lost while h ran (and an event said so): acting
		// on it now could only be refused.
		return nil
	}
	switch {
	case ctx.Err() != nil && err != nil:
		_ = l.Release() // refused only if the lease was lost: nothing left to do
	case err != nil:
		_ = l.Fail(err)
	case ctx.Err() != nil:
		_ = l.Complete()
	default:
		// The next Lease is allocated here, not under the router's lock.
		next := newRunLease[T](ctx)
		if u.r.completeNext(l, id, &next.Lease) {
			return next
		}
	}
	return nil
}

// completeNext completes l as Lease.Complete does and, under the same
// lock, leases the next ready job to workerID for Run into next, if one is
// ready and the Router open. It reports whether it did.
func (r *Router[T]) completeNext(l *Lease[T], workerID string, next *Lease[T]) bool {
	j, now, err := l.lock()
	if err != nil {
		r.unlockAndDeliver()
		return false
	}
	r.complete(j, l, now)
	granted := false
	if r.phase == phaseOpen && !r.backlogFull() { // else acquire waits for room
		_, err := r.grant(workerID, now, next)
		granted = err == nil
	}
	r.unlockAndDeliver()
	return granted
}

// leaseCtx is the context Run gives a handler: canceled when the lease is
// lost, when Run's context is done, or when the handler has returned. The
// context.Context behind it is made on first use (Done, Value, or Err
// after a cancellation), so a handler that never looks at its context
// costs no context at all; until then Err answers from the cause and the
// parent. The Value of a made context is what makes context.Cause and
// derived contexts work as for any context.WithCancelCause.
type leaseCtx struct {
	parent context.Context // set before the lease is granted, then read-only

	mu     sync.Mutex
	ctx    context.Context // nil until made
	cancel context.CancelCauseFunc
	cause  error // the first cause stop was given; nil while live
	perr   error // the parent's Err when stop came before the context was made
}

// made returns the context behind c, making it if needed.
func (c *leaseCtx) made() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		p := c.parent
		if c.cause != nil && c.perr == nil {
			// Stopped while the parent was live: that cause came first and
			// must stay the context's, whatever the parent did since.
			p = context.WithoutCancel(p)
		}
		c.ctx, c.cancel = context.WithCancelCause(p)
		if c.cause != nil {
			c.cancel(c.cause)
		}
	}
	return c.ctx
}

// stop cancels c with cause unless it was stopped before, and returns the
// first cause it was stopped with.
func (c *leaseCtx) stop(cause error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause == nil {
		c.cause = cause
		if c.cancel != nil {
			c.cancel(cause)
		} else {
			c.perr = c.parent.Err() // was the parent done first?
		}
	}
	return c.cause
}

// live reports whether c has not been stopped: the lease is not lost and
// the handler has not returned.
func (c *leaseCtx) live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause == nil
}

// Deadline is the parent's: a lease's end is not known in advance.
func (c *leaseCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done makes the context and returns its channel.
func (c *leaseCtx) Done() <-chan struct{} { return c.made().Done() }

// Value makes the context and asks it, so that context.Cause finds it.
func (c *leaseCtx) Value(key any) any { return c.made().Value(key) }

// Err answers without making the context when it can.
func (c *leaseCtx) Err() error {
	c.mu.Lock()
	ctx, cause, perr := c.ctx, c.cause, c.perr
	c.mu.Unlock()
	switch {
	case ctx != nil:
		return ctx.Err()
	case perr != nil:
		return perr // the parent was done first, as the made context will say
	case cause != nil:
		return context.Canceled
	}
	return c.parent.Err()
}

// leaseLost stops c with the loss (lostWatcher).
func (c *leaseCtx) leaseLost(cause error) { c.stop(cause) }

// String names the context as the context package names its own.
func (c *leaseCtx) String() string { return fmt.Sprint(c.parent) + ".WithCancel(leaserouter lease)" }

// call runs h, turning a panic into an error carrying the stack.
func call[T any](ctx context.Context, l *Lease[T], h Handler[T]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: debug.Stack()}
		}
	}()
	return h(ctx, l)
}

type panicError struct {
	value any
	stack []byte
}

// Error gives the panic value and the stack, as Job.LastError shows them.
func (e *panicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", e.value, e.stack) }
