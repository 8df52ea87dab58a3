package pgrouter

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// channel is the LISTEN/NOTIFY channel of every queue of the default
// schema (schemaChannel names another schema's); a notification's
// payload is the queue whose jobs became ready (enqueued, released,
// retried, or pending again after an expiry).
const channel = "leaserouter"

// listenName is c as LISTEN takes it: a quoted identifier, but for the
// default schema's, sent as it always was.
func listenName(c string) string {
	if c == channel {
		return c
	}
	return pgx.Identifier{c}.Sanitize()
}

// waker tells blocked Acquires that a job may be ready: by a notification
// from any process (the listener of shared.go), or by Close. A missed notification costs at most
// Options.PollInterval, as waiters also poll.
type waker struct {
	mu     sync.Mutex
	ch     chan struct{} // closed by the next broadcast
	parked int           // waiters parked on ch (see park)
}

func newWaker() *waker { return &waker{ch: make(chan struct{})} }

// wait returns a channel closed at the next broadcast.
func (w *waker) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// broadcast wakes every waiter.
func (w *waker) broadcast() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.parked = 0
	w.mu.Unlock()
}

// park records a waiter blocked on ch (from wait) until the returned func
// is called: only the next broadcast (or its own timer) wakes it. A ch
// broadcast already is not counted: its waiter does not block. It
// observes, never steers: tests read parkedNow to know that an Acquire is
// blocked.
func (w *waker) park(ch <-chan struct{}) (unpark func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch != w.ch {
		return func() {}
	}
	w.parked++
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if ch == w.ch {
			w.parked--
		}
	}
}

// parkedNow is how many waiters are blocked until the next broadcast.
func (w *waker) parkedNow() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.parked
}

// notify wakes the Routers of this queue in every process (best effort:
// they also poll).
func (r *Router[T]) notify(ctx context.Context) { r.notifyOn(ctx, r.db) }

// notifyOn is notify on q (a connection already held: no wait for the
// pool).
func (r *Router[T]) notifyOn(ctx context.Context, q querier) {
	_, _ = q.Exec(ctx, r.st.notifyQueue, args{"channel": r.channel, "queue": r.opts.Queue})
}
