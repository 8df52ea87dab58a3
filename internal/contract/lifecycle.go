package contract

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// A Client's lifecycle, on every backend: New, then Started, then
// Stopped. Start twice is an error; Register after Start, or of a name
// registered already, is an error; Stop is idempotent and bounded by its
// ctx; the Run goroutines Start makes are counted, their first error
// kept, and the first Stop waits for them. Each backend's Client holds a
// *Lifecycle and passes it what is its own (the queues' Runs, how to
// close the queues, how a kind is added to its tables).

// lifeState is where a Lifecycle is.
type lifeState uint8

const (
	lifeNew lifeState = iota
	lifeStarted
	lifeStopped
)

// Lifecycle is the state machine of one Client. Make it with
// NewLifecycle; its methods are safe for concurrent use.
type Lifecycle struct {
	errInvalid, errClosed error // the core's ErrInvalidOptions and ErrClosed

	// mu guards the fields below, and whatever the callbacks run under it
	// write (Register's add, Start's begin: the Client's tables of kinds,
	// its middleware chain), so that Register's checks and its add are
	// one step, and no kind is added once Start has begun.
	mu      sync.Mutex
	state   lifeState
	kinds   []string      // the registered kinds' names, in order; a new slice at each Register, never written in place
	running int           // Start's Run goroutines still running
	ran     chan struct{} // closed when the last of them has returned (or at Stop if Start made none)
	runErr  error         // the first error one of them returned
	stopped chan struct{} // closed when the first Stop has returned
}

// NewLifecycle returns the Lifecycle of a new Client. Its errors wrap
// errInvalid (the core's ErrInvalidOptions) or are errClosed (the core's
// ErrClosed).
func NewLifecycle(errInvalid, errClosed error) *Lifecycle {
	return &Lifecycle{
		errInvalid: errInvalid,
		errClosed:  errClosed,
		ran:        make(chan struct{}),
		stopped:    make(chan struct{}),
	}
}

// Register registers the kind name: under l's lock it refuses a Client
// started (an error wrapping errInvalid), stopped (errClosed), or that
// has name registered already (an error wrapping errInvalid); otherwise
// it calls add, still under the lock, and records name unless add
// returns an error, which Register returns. add is the backend's: its
// own limits, then the kind appended to its tables; it must not block
// nor call user code. The check of name itself (CheckKindName) is the
// caller's, before.
func (l *Lifecycle) Register(name string, add func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.state == lifeStarted:
		return fmt.Errorf("%w: Register of kind %s after Start", l.errInvalid, Quote(name))
	case l.state == lifeStopped:
		return l.errClosed
	case slices.Contains(l.kinds, name):
		return fmt.Errorf("%w: kind %s is registered already", l.errInvalid, Quote(name))
	}
	if err := add(); err != nil {
		return err
	}
	// A new slice, not an append in place: Kinds' callers keep theirs.
	l.kinds = append(slices.Clip(l.kinds), name)
	return nil
}

// Kinds returns the registered kinds' names, in the order of Register.
// The slice is never written again: the caller may keep it, and must
// not write it.
func (l *Lifecycle) Kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kinds
}

// Start moves l from New to Started and returns nil: under l's lock it
// calls begin with the registered kinds (as Kinds), and runs each
// function begin returns (a queue's Run) in a goroutine of its own,
// which Stop waits for. begin must not block nor call user code; the
// functions it returns run without the lock. Start returns an error
// wrapping errInvalid if l was started before, and errClosed after Stop,
// and calls nothing then.
func (l *Lifecycle) Start(begin func(kinds []string) []func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case lifeStarted:
		return fmt.Errorf("%w: Client started twice", l.errInvalid)
	case lifeStopped:
		return l.errClosed
	}
	l.state = lifeStarted
	runs := begin(l.kinds)
	l.running = len(runs)
	if l.running == 0 {
		close(l.ran)
	}
	for _, run := range runs {
		go l.run(run) // owned by Stop, which waits for l.ran
	}
	return nil
}

// run runs one of Start's functions, keeps its error (the first of all,
// unless it is errClosed: Stop closed the queue before its Run began),
// and closes l.ran after the last.
func (l *Lifecycle) run(f func() error) {
	err := f()
	// errors.Is may call the error's methods: not under the lock.
	if err != nil && errors.Is(err, l.errClosed) {
		err = nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runErr == nil {
		l.runErr = err
	}
	if l.running--; l.running == 0 {
		close(l.ran)
	}
}

// Stopped reports whether Stop has been called.
func (l *Lifecycle) Stopped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == lifeStopped
}

// Stop moves l to Stopped. The first call does the work, without l's
// lock: closeAll(ctx) (the backend closes its queues, which ends their
// Runs), then a wait for Start's Run goroutines until ctx is done, then
// release (if not nil: what the backend holds besides its queues). It
// returns closeAll's error (ctx.Err() itself if that wraps it: a Close
// of each queue cut short by ctx); else ctx.Err() if ctx was done before
// the Runs returned; else the first error a Run returned (one wrapping
// errClosed excepted); else nil. A later or concurrent call waits for the
// first to return, until ctx is done, and returns nil. A nil ctx means
// context.Background(). Stop of a Lifecycle never started runs nothing
// but closeAll and release.
func (l *Lifecycle) Stop(ctx context.Context, closeAll func(context.Context) error, release func()) error {
	if ctx == nil {
		ctx = context.Background()
	}
	l.mu.Lock()
	if l.state == lifeStopped {
		l.mu.Unlock()
		WaitFor(ctx, l.stopped)
		return nil
	}
	if l.state == lifeNew {
		close(l.ran) // no Run will close it
	}
	l.state = lifeStopped
	l.mu.Unlock()
	// Closed however the work ends, so that no later Stop waits for a
	// first one that panicked.
	defer close(l.stopped)
	err := closeAll(ctx)
	if !WaitFor(ctx, l.ran) && err == nil {
		err = ctx.Err()
	}
	if cerr := ctx.Err(); cerr != nil && err != nil && errors.Is(err, cerr) {
		err = cerr // once, not once per queue whose Close it cut short
	}
	if release != nil {
		release()
	}
	if err == nil {
		l.mu.Lock()
		err = l.runErr
		l.mu.Unlock()
	}
	return err
}

// WaitFor waits until ch is closed (true) or ctx is done (false). A ch
// closed already counts, even with ctx done: which of two ready cases a
// select takes is random, so ch is looked at first and again at ctx's
// end.
func WaitFor(ctx context.Context, ch <-chan struct{}) bool {
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
