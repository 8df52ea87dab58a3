package pgrouter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter"
)

// completeLater completes ls in the background (none if ls is empty).
func (r *Router[T]) completeLater(ls []*Lease[T]) {
	if len(ls) == 0 {
		return
	}
	r.later(func(ctx context.Context) error {
		if _, ok := r.completeAll(ctx, r.db, ls, false); !ok {
			return errNotDone
		}
		return nil
	})
}

// handBackLater hands ls back in the background (see handBack).
func (r *Router[T]) handBackLater(ls []*Lease[T]) {
	if len(ls) == 0 {
		return
	}
	r.later(func(ctx context.Context) error { _, err := r.handBackErr(ctx, r.db, ls, false); return err })
}

// endOrLater ends l with end (Release or Fail) on ctx; if the database
// could not be asked, or did not answer, it is done in the background,
// unless the row shows it done already (ended for reason) or the lease
// ended otherwise meanwhile.
func (r *Router[T]) endOrLater(ctx context.Context, l *Lease[T], reason leaserouter.LostReason, end func(context.Context) error) {
	ended := func(err error) bool { return err == nil || errors.As(err, new(*leaserouter.LeaseLostError)) }
	if ended(end(ctx)) {
		return
	}
	r.later(func(ctx context.Context) error {
		if !r.holds(l) {
			return nil
		}
		if l.resolved(ctx, reason) { // the first try got through
			r.release(l)
			return nil
		}
		if err := end(ctx); !ended(err) {
			return err
		}
		return nil
	})
}

// errNotDone makes a background task try again.
var errNotDone = errors.New("pgrouter: not done")

// tasks runs a Router's background work (resolving unknown outcomes,
// finishing what a stopping Run could not): each task is retried, with
// backoff, until it succeeds or Close ends it.
type tasks struct {
	ctx    context.Context // ended by Close
	cancel context.CancelFunc

	mu     sync.Mutex
	n      int           // tasks running
	idle   chan struct{} // closed when n falls to 0; nil when nobody waits
	closed bool          // no task starts any more
}

func newTasks() *tasks {
	ctx, cancel := context.WithCancel(context.Background())
	return &tasks{ctx: ctx, cancel: cancel}
}

// later runs f in the background until it returns nil, waiting 50ms
// doubling to 1s between tries, each try bounded by a LeaseDuration.
// f's ctx is a grace itself (see graced): its round trips get no grace
// after it ends, so Close's end of the tasks takes effect at once.
// After Close it does nothing.
func (r *Router[T]) later(f func(ctx context.Context) error) {
	t := r.tasks
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.n++
	t.mu.Unlock()
	go func() {
		defer t.done()
		backoff := 50 * time.Millisecond
		for t.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(t.ctx, r.opts.LeaseDuration)
			err := f(graced(ctx))
			cancel()
			if err == nil {
				return
			}
			select {
			case <-t.ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		}
	}()
}

func (t *tasks) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// idleCh returns a channel closed once no task runs (nil if none runs
// now); closing also stops new tasks from starting.
func (t *tasks) idleCh(closing bool) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = t.closed || closing
	if t.n == 0 {
		return nil
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	return t.idle
}

// wait waits until no task runs, or until ctx is done (then it returns
// ctx.Err()).
func (t *tasks) wait(ctx context.Context) error { return t.awaitIdle(ctx, false) }

// close waits until every task has ended, or until ctx is done (then it
// ends them, waits for them to return, which they do at once, and
// returns ctx.Err()). No task starts after.
func (t *tasks) close(ctx context.Context) error {
	defer t.cancel()
	err := t.awaitIdle(ctx, true)
	if err == nil {
		return nil
	}
	t.cancel()
	if idle := t.idleCh(true); idle != nil {
		<-idle
	}
	return err
}

// awaitIdle waits until no task runs (nil), or until ctx is done
// (ctx.Err()); closing refuses new tasks first, as idleCh does.
func (t *tasks) awaitIdle(ctx context.Context, closing bool) error {
	idle := t.idleCh(closing)
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// withGrace returns a context that is not done when ctx is, but grace
// later (grace from now if ctx is done already): for a last round trip
// whose answer is worth a short wait after the caller's ctx ended.
func withGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Value(graceKey{}) != nil {
		grace = 0
	}
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return g, func() { stop(); cancel() }
}

// graceKey marks a ctx that is itself a grace (a stopping Run's): a last
// round trip on it gets no more after it ends.
type graceKey struct{}

// graced marks ctx as a grace: withGrace adds nothing to it.
func graced(ctx context.Context) context.Context { return context.WithValue(ctx, graceKey{}, true) }

// lastGrace is how long a last round trip may go on after its caller's
// ctx ended (the read that resolves a lease operation's unknown outcome);
// closeGrace, Close's revocation and background work (one deadline for
// both); runGrace, a stopping Run's last round trips after its last
// handler returned (reads resolving their outcomes included: see
// graced). Each keeps its call within 100ms of its ctx's end.
const (
	lastGrace  = 40 * time.Millisecond
	closeGrace = 50 * time.Millisecond
	runGrace   = 80 * time.Millisecond
)
