package contract

import (
	"context"
	"fmt"
	"log/slog"
)

// The rules of a Client on every backend: a kind's name, a queue's name,
// the options a kind is registered with, and the middleware chain around
// each attempt.

// DefaultQueue is the queue of a Client with no Queues configured, the
// queue of a kind registered without WithKindQueue, and the queue a core
// Router serves (leaserouter.DefaultQueue).
const DefaultQueue = "default"

// KindOption is one option of Register (leaserouter.KindOption is a type
// defined on it): a comparable value, as EnqueueOption is.
type KindOption struct {
	queue string
}

// WithKindQueue is leaserouter.WithKindQueue's option.
func WithKindQueue(queue string) KindOption { return KindOption{queue: queue} }

// AnyKindOption is the constraint of ReadKindOptions: KindOption and the
// types defined on it.
type AnyKindOption interface{ ~struct{ queue string } }

// ReadKindOptions is the queue opts route a kind to: the last
// WithKindQueue's, or DefaultQueue when none is given.
func ReadKindOptions[O AnyKindOption](opts []O) (queue string) {
	queue = DefaultQueue
	for _, o := range opts {
		if o := KindOption(o); o.queue != "" {
			queue = o.queue
		}
	}
	return queue
}

// CheckKindName returns nil for a valid kind or queue name (what is
// "kind" or "queue", for the message): not empty, and the rule for IDs
// (NameProblem with MaxIDBytes); else an error wrapping errInvalid.
func CheckKindName(errInvalid error, what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s name", errInvalid, what)
	}
	if p := NameProblem(name, MaxIDBytes, "MaxIDBytes"); p != "" {
		return fmt.Errorf("%w: %s name %s", errInvalid, what, p)
	}
	return nil
}

// Chain composes mw around an attempt once, outermost first: the result
// calls mw[0] with a next that calls mw[1], ..., and the last one's next
// is inner. An empty mw gives inner's caller inner itself. M is
// leaserouter.Middleware; A is leaserouter.Attempt.
func Chain[M ~func(context.Context, A, func(context.Context) error) error, A any](mw []M) func(ctx context.Context, a A, inner func(context.Context) error) error {
	if len(mw) == 0 {
		return func(ctx context.Context, _ A, inner func(context.Context) error) error { return inner(ctx) }
	}
	return func(ctx context.Context, a A, inner func(context.Context) error) error {
		return step(ctx, mw, 0, a, inner)
	}
}

// step runs mw[i] with a next that runs the rest of the chain.
func step[M ~func(context.Context, A, func(context.Context) error) error, A any](ctx context.Context, mw []M, i int, a A, inner func(context.Context) error) error {
	if i == len(mw) {
		return inner(ctx)
	}
	return mw[i](ctx, a, func(ctx context.Context) error { return step(ctx, mw, i+1, a, inner) })
}

// QueueOf is the queue the last WithQueue of opts names, or dflt when
// none does: the queue a Client sends a job to on every backend (dflt is
// its kind's queue).
func QueueOf[O AnyEnqueueOption](opts []O, dflt string) string {
	q := dflt
	for _, o := range opts {
		if o := option(o); o.kind == optQueue && o.str != "" {
			q = o.str
		}
	}
	return q
}

// UnknownQueue is the error of an enqueue to a queue the Client has not
// configured, wrapping errInvalidJob.
func UnknownQueue(errInvalidJob error, queue, id string) error {
	return fmt.Errorf("%w: WithQueue(%s) for job %q: the Client has no such queue", errInvalidJob, Quote(queue), id)
}

// UnknownPeriodicQueue is the error of a Kind's AddPeriodic whose
// WithQueue names a queue the Client lacks.
func UnknownPeriodicQueue(errInvalidOptions error, name, queue string) error {
	return fmt.Errorf("%w: Periodic %s: WithQueue(%s): the Client has no such queue", errInvalidOptions, Quote(name), Quote(queue))
}

// HookLock makes a Client's hooks serial across its queues: each call of
// OnEvent (SerialHook) and of the Logger's handler (Handler) holds it, so
// that no two run at once whatever queue's events they deliver. It is a
// channel of one, not a sync.Mutex, so that a goroutine waiting for it is
// seen as durably blocked (testing/synctest), as the library waits
// everywhere. Make it with NewHookLock; the zero HookLock is not ready.
type HookLock struct{ ch chan struct{} }

// NewHookLock returns a HookLock no one holds.
func NewHookLock() HookLock { return HookLock{make(chan struct{}, 1)} }

func (h HookLock) lock()   { h.ch <- struct{}{} }
func (h HookLock) unlock() { <-h.ch }

// SerialHook returns f called while holding h (released if f panics),
// or nil for a nil f. E is leaserouter.Event.
func SerialHook[E any](h HookLock, f func(E)) func(E) {
	if f == nil {
		return nil
	}
	return func(e E) {
		h.lock()
		defer h.unlock()
		f(e)
	}
}

// Handler returns inner with each call made while holding h (released if
// the call panics); the handlers its WithAttrs and WithGroup return hold
// h too.
func (h HookLock) Handler(inner slog.Handler) slog.Handler { return lockedHandler{h, inner} }

// lockedHandler is HookLock.Handler's slog.Handler.
type lockedHandler struct {
	h     HookLock
	inner slog.Handler
}

// Enabled asks the inner handler, holding the lock.
func (l lockedHandler) Enabled(ctx context.Context, level slog.Level) bool {
	l.h.lock()
	defer l.h.unlock()
	return l.inner.Enabled(ctx, level)
}

// Handle passes r to the inner handler, holding the lock.
func (l lockedHandler) Handle(ctx context.Context, r slog.Record) error {
	l.h.lock()
	defer l.h.unlock()
	return l.inner.Handle(ctx, r)
}

// WithAttrs is the inner handler's WithAttrs, still under the lock.
func (l lockedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return lockedHandler{l.h, l.inner.WithAttrs(as)}
}

// WithGroup is the inner handler's WithGroup, still under the lock.
func (l lockedHandler) WithGroup(name string) slog.Handler {
	return lockedHandler{l.h, l.inner.WithGroup(name)}
}
