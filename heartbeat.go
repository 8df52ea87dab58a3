package leaserouter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

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

// WorkerOptions configure Run. The zero value is valid.
type WorkerOptions struct {
	// Workers is the number of worker goroutines. Default
	// runtime.GOMAXPROCS(0); negative is invalid.
	Workers int
	// WorkerID is the prefix of worker IDs: worker i is "<WorkerID>-<i>".
	// Default "<hostname>-<pid>".
	WorkerID string
	// HeartbeatInterval is how often a running job's lease is extended.
	// Default LeaseDuration/3; negative, or >= LeaseDuration (the lease
	// would expire between heartbeats), is invalid. Keep it well below
	// LeaseDuration so a late heartbeat or two do not lose the lease.
	HeartbeatInterval time.Duration
}

func (o WorkerOptions) withDefaults(lease time.Duration) (WorkerOptions, error) {
	switch {
	case o.Workers < 0:
		return o, fmt.Errorf("%w: WorkerOptions.Workers is %d, must be >= 0 (0 = GOMAXPROCS)", ErrInvalidOptions, o.Workers)
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
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = defaultInterval(lease)
	}
	if o.HeartbeatInterval >= lease { // checked after defaulting: LeaseDuration/3 of 1ns is no interval
		return o, fmt.Errorf("%w: WorkerOptions.HeartbeatInterval %v must be < LeaseDuration %v", ErrInvalidOptions, o.HeartbeatInterval, lease)
	}
	return o, nil
}

func defaultInterval(lease time.Duration) time.Duration { return max(lease/3, 1) }

// Run processes jobs with opts.Workers worker goroutines until ctx is done
// or the Router is closed. Each worker acquires a job, runs h with a context
// canceled as soon as the lease is lost or its expiry passes, heartbeats
// every opts.HeartbeatInterval in the background while h runs, and then
// completes the job (h returned nil), fails it (h returned an error or
// panicked) — or, when ctx was done meanwhile, completes it if h returned
// nil and releases it otherwise. If the lease was lost while h ran, Run
// leaves the job alone: its new state was decided by whoever ended the
// lease.
//
// Run blocks until every handler it started has returned and every
// goroutine it started has ended. It returns nil when stopped by ctx or
// Close; ErrClosed at once if the Router was already closed; and at once,
// starting nothing, an error wrapping ErrInvalidOptions for bad opts or a
// nil h. Several Runs may share a Router. A nil ctx means
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
	var wg sync.WaitGroup
	for i := range opts.Workers {
		id := fmt.Sprintf("%s-%d", opts.WorkerID, i)
		wg.Go(func() { r.work(ctx, id, opts.HeartbeatInterval, h) })
	}
	wg.Wait()
	return nil
}

// work is one worker loop of Run.
func (r *Router[T]) work(ctx context.Context, id string, interval time.Duration, h Handler[T]) {
	for {
		l, err := r.Acquire(ctx, id)
		if err != nil {
			return // ctx done or Router closed
		}
		hctx, k := keepAlive(ctx, l, interval)
		err = call(hctx, l, h)
		k.stop(context.Canceled)
		switch {
		case errors.Is(context.Cause(hctx), ErrLeaseLost):
			// The lease was lost while h ran (and an event said so): acting
			// on it now could only be refused.
		case ctx.Err() != nil && err != nil:
			_ = l.Release() // refused only if the lease was lost: nothing left to do
		case err == nil:
			_ = l.Complete()
		default:
			_ = l.Fail(err)
		}
	}
}

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

// KeepAlive heartbeats l every interval in the background until the
// returned cancel func is called or the returned context is done. The
// context, derived from ctx, is canceled as soon as a heartbeat is refused
// or the lease is lost otherwise (expiry, Cancel, Close), with a cause
// wrapping ErrLeaseLost (context.Cause). An interval <= 0 means
// LeaseDuration/3. An interval >= LeaseDuration (it could never keep the
// lease) or a nil l gives a context already canceled with a cause wrapping
// ErrInvalidOptions; a lease already lost gives one already canceled with
// its *LeaseLostError. Heartbeats run on a timer, not a goroutine of their
// own, until the first is due. cancel stops heartbeating, waits for a
// heartbeat in flight, and cancels the context; it is idempotent and safe
// to call from any goroutine. It does not end the lease: Complete, Fail or
// Release it as usual. A nil ctx means context.Background().
//
// This is the keep-alive of etcd's concurrency.Session, in process.
func KeepAlive[T any](ctx context.Context, l *Lease[T], interval time.Duration) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if l == nil || l.r == nil {
		return canceled(ctx, fmt.Errorf("leaserouter: KeepAlive of a nil *Lease: %w", ErrInvalidOptions))
	}
	lease := l.r.opts.LeaseDuration
	if interval <= 0 {
		interval = defaultInterval(lease)
	}
	if interval >= lease {
		return canceled(ctx, fmt.Errorf("%w: KeepAlive interval %v must be < LeaseDuration %v", ErrInvalidOptions, interval, lease))
	}
	kctx, k := keepAlive(ctx, l, interval)
	return kctx, func() { k.stop(context.Canceled) }
}

func canceled(ctx context.Context, cause error) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	return c, func() {}
}

// keeper heartbeats one lease on a timer. Between beats no goroutine
// exists; a beat runs in the timer's goroutine.
type keeper[T any] struct {
	l        *Lease[T]
	ctx      context.Context
	cancel   context.CancelCauseFunc
	interval time.Duration

	mu      sync.Mutex // serialises beats with stop
	timer   *time.Timer
	armed   bool // timer set and its beat not started
	stopped bool
	beats   sync.WaitGroup // one per armed timer, so stop can wait for a beat in flight
}

func keepAlive[T any](ctx context.Context, l *Lease[T], interval time.Duration) (context.Context, *keeper[T]) {
	kctx, cancel := context.WithCancelCause(ctx)
	k := &keeper[T]{l: l, ctx: kctx, cancel: cancel, interval: interval}
	if !l.watch(cancel) {
		k.stopped = true // cancel has been called with the loss
		return kctx, k
	}
	k.mu.Lock()
	k.beats.Add(1)
	k.armed = true
	k.timer = time.AfterFunc(interval, k.beat)
	k.mu.Unlock()
	return kctx, k
}

func (k *keeper[T]) beat() {
	defer k.beats.Done()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = false
	if k.stopped || k.ctx.Err() != nil {
		return
	}
	if err := k.l.Heartbeat(nil); err != nil {
		k.stopped = true
		k.cancel(err)
		return
	}
	k.beats.Add(1)
	k.armed = true
	k.timer.Reset(k.interval)
}

// stop ends heartbeating, waits for a beat in flight and cancels the
// context with cause (a no-op if it was already canceled).
func (k *keeper[T]) stop(cause error) {
	k.mu.Lock()
	k.stopped = true
	if k.armed && k.timer.Stop() {
		k.armed = false
		k.beats.Done() // the beat will never run
	}
	k.mu.Unlock()
	k.beats.Wait()
	k.cancel(cause)
}
