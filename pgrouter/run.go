package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter"
)

// Handler processes one leased job, as the core's Handler does: its ctx
// is canceled as soon as the lease is lost or can no longer be proven
// valid (see Run).
type Handler[T any] func(ctx context.Context, l *Lease[T]) error

// Run processes jobs with opts.Workers worker goroutines until ctx is done
// or the Router is closed, with the core's semantics (leaserouter.Run):
// each worker leases jobs, runs h with a context canceled as soon as the
// lease is lost, and then completes the job (h returned nil), fails it (h
// returned an error or panicked), or, when ctx was done meanwhile,
// completes it if h returned nil and releases it otherwise. If the lease
// was lost while h ran, Run leaves the job alone. A handler may complete
// its own lease with CompleteTx, writing its result in the same
// transaction; when that committed, Run does nothing more for the job,
// otherwise it goes on as above.
//
// Round trips. One heartbeat goroutine per Run extends every lease the
// Run holds in one statement every opts.HeartbeatInterval, however many
// there are. A worker leases up to opts.Batch jobs in one statement (one
// at first, doubling after a batch that took at most a quarter of
// HeartbeatInterval, halving after one that took over half), runs them in
// order, and completes those whose handler returned nil in the same round
// trip as its next lease. At each heartbeat, the jobs of every batch still
// waiting their turn are handed back unstarted (pending again in their
// old place, the lease not counted as an attempt), in the same round; so
// a job leased ahead waits at most one HeartbeatInterval, never loses its
// lease while it waits, and a long job holds others back for at most one
// HeartbeatInterval. When ctx is done or Close starts they are handed
// back at once.
//
// Validity from the client's side: a handler's ctx is canceled with a
// *leaserouter.LeaseLostError when a heartbeat finds the lease lost, and
// with an error wrapping ErrLeaseLost when LeaseDuration has passed, on
// the client's monotonic clock, since the send time of the last accepted
// grant or heartbeat (the database unreachable: the lease can no longer be
// proven valid). Database errors do not stop Run: a worker backs off (50ms
// doubling to 1s) and goes on when the database is back.
//
// Run blocks until every handler it started has returned and every
// goroutine it started has ended. It returns nil when stopped by ctx or
// Close; ErrClosed at once if the Router was already closed; at once, an
// error wrapping ErrInvalidOptions for bad opts (checked as the core
// checks them) or a nil h. Several Runs, in one process or many, may
// share a queue. A nil ctx means context.Background().
func (r *Router[T]) Run(ctx context.Context, opts leaserouter.WorkerOptions, h Handler[T]) error {
	ctx = orBackground(ctx)
	if h == nil {
		return fmt.Errorf("%w: nil Handler", leaserouter.ErrInvalidOptions)
	}
	opts, err := opts.WithDefaults(r.opts.LeaseDuration)
	if err != nil {
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	u := &runner[T]{r: r, h: h, opts: opts, held: make(map[*Lease[T]]*held)}
	u.stopping, u.stop = context.WithCancel(context.Background())
	go func() { // the Run stops on ctx or on Close
		select {
		case <-ctx.Done():
		case <-r.closing:
		case <-u.stopping.Done():
		}
		u.stop()
	}()
	var beats, workers sync.WaitGroup
	beatsDone := make(chan struct{})
	beats.Go(func() { u.heartbeats(beatsDone) })
	for i := range opts.Workers {
		w := &worker[T]{u: u, id: fmt.Sprintf("%s-%d", opts.WorkerID, i), size: 1}
		u.workers = append(u.workers, w)
		workers.Go(w.work)
	}
	workers.Wait()
	close(beatsDone)
	beats.Wait()
	u.stop()
	return nil
}

// runner is one Run.
type runner[T any] struct {
	r    *Router[T]
	h    Handler[T]
	opts leaserouter.WorkerOptions

	stopping context.Context // done when ctx is done or Close starts
	stop     context.CancelFunc

	mu      sync.Mutex
	workers []*worker[T]
	held    map[*Lease[T]]*held // the Run's leases not yet ended: waiting or running
}

// held is what the Run knows of one of its leases.
type held struct {
	cancel context.CancelCauseFunc // running: cancels the handler's ctx; nil while waiting
	timer  *time.Timer             // running: fires when the lease can no longer be proven valid
}

// worker is one worker goroutine of a Run.
type worker[T any] struct {
	u       *runner[T]
	id      string
	size    int         // the next batch's size
	waiting []*Lease[T] // leased ahead, not started; guarded by u.mu
	started time.Time   // when the current batch was leased; guarded by u.mu
	cut     bool        // the heartbeat handed back the batch's tail; guarded by u.mu
	done    []*Lease[T] // handlers returned nil: completed with the next claim
}

// dbCtx bounds one round trip of Run's to a LeaseDuration, past which its
// answer would be of no use, and outlives Run's ctx (stopping must still
// complete, release and hand back).
func (u *runner[T]) dbCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), u.r.opts.LeaseDuration)
}

// work is a worker's loop.
func (w *worker[T]) work() {
	u, r := w.u, w.u.r
	backoff := time.Duration(0)
	for {
		if u.stopping.Err() != nil {
			w.flush()
			return
		}
		woken := r.wake.wait()
		ctx, cancel := u.dbCtx()
		ls, due, err := r.claim(ctx, "Run", w.id, w.size, true, w.done)
		cancel()
		var wait time.Duration
		switch {
		case err == nil || errors.Is(err, leaserouter.ErrNoJob):
			w.done, backoff = nil, 0
			if err == nil {
				w.batch(ls)
				continue
			}
			wait = r.opts.PollInterval
			if due != nil {
				wait = min(wait, max(time.Duration(*due*float64(time.Second)), 0)+time.Millisecond)
			}
		case errors.Is(err, leaserouter.ErrClosed):
			w.flush()
			return
		default: // the database is unreachable or failed: back off, go on
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
			wait, woken = backoff, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-u.stopping.Done():
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}

// batch runs a batch's jobs in order, then adapts the next batch's size.
func (w *worker[T]) batch(ls []*Lease[T]) {
	u := w.u
	u.mu.Lock()
	w.waiting, w.started, w.cut = ls, time.Now(), false
	for _, l := range ls {
		u.held[l] = &held{}
	}
	u.mu.Unlock()
	for {
		u.mu.Lock()
		if len(w.waiting) == 0 {
			break
		}
		l := w.waiting[0]
		w.waiting = w.waiting[1:]
		h := u.held[l]
		u.mu.Unlock()
		w.run(l, h)
	}
	took, cut := time.Since(w.started), w.cut
	u.mu.Unlock()
	interval := u.opts.HeartbeatInterval
	switch {
	case cut && took >= interval/2: // a long job: one at a time again
		w.size = 1
	case took <= interval/4:
		w.size = min(2*w.size, u.opts.Batch)
	case took > interval/2:
		w.size = max(1, w.size/2)
	}
}

// run runs the handler on l, then ends the lease as Run's rules say.
func (w *worker[T]) run(l *Lease[T], h *held) {
	u := w.u
	hctx, cancel := context.WithCancelCause(context.Background())
	u.mu.Lock()
	h.cancel = cancel
	h.timer = time.AfterFunc(time.Until(l.provenUntil()), func() { cancel(errUnproven) })
	u.mu.Unlock()
	err := u.call(hctx, l)
	u.mu.Lock()
	h.timer.Stop()
	delete(u.held, l)
	u.mu.Unlock()
	var lost *leaserouter.LeaseLostError
	if errors.As(context.Cause(hctx), &lost) {
		cancel(nil)
		return // lost while h ran: its new state was decided by whoever ended it
	}
	cancel(nil)
	if l.completedTx() {
		return
	}
	ctx, done := u.dbCtx()
	defer done()
	switch {
	case err == nil:
		w.done = append(w.done, l)
		if u.stopping.Err() != nil {
			w.flush()
		}
	case u.stopping.Err() != nil:
		_ = l.Release(ctx)
	default:
		_ = l.Fail(ctx, err)
	}
}

// errUnproven cancels a handler's ctx when its lease can no longer be
// proven valid from the client's clock.
var errUnproven = fmt.Errorf("%w: no heartbeat accepted within LeaseDuration (database unreachable?)", leaserouter.ErrLeaseLost)

// call runs the handler, turning a panic into an error.
func (u *runner[T]) call(ctx context.Context, l *Lease[T]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pgrouter: handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return u.h(ctx, l)
}

// flush completes the leases whose handlers returned nil and hands back
// those waiting, as a worker stops.
func (w *worker[T]) flush() {
	u := w.u
	u.mu.Lock()
	waiting := w.waiting
	w.waiting = nil
	for _, l := range waiting {
		delete(u.held, l)
	}
	u.mu.Unlock()
	ctx, cancel := u.dbCtx()
	defer cancel()
	u.r.handBack(ctx, waiting)
	if len(w.done) > 0 {
		u.r.completeAll(ctx, w.done)
		w.done = nil
	}
}

// heartbeats extends every lease of the Run each HeartbeatInterval in one
// statement, hands back the jobs of batches still waiting their turn, and
// hands back every waiting job at once when the Run stops; until done.
func (u *runner[T]) heartbeats(done <-chan struct{}) {
	t := time.NewTicker(u.opts.HeartbeatInterval)
	defer t.Stop()
	stopping := u.stopping.Done()
	for {
		select {
		case <-done:
			return
		case <-stopping: // hand back the waiting jobs at once
			stopping = nil
			u.beat()
		case <-t.C:
			u.beat()
		}
	}
}

// beat is one heartbeat round: the jobs of every batch still waiting
// their turn are handed back, the other leases extended; a lease found
// lost cancels its handler's ctx.
func (u *runner[T]) beat() {
	u.mu.Lock()
	var back, keep []*Lease[T]
	for _, w := range u.workers {
		if len(w.waiting) > 0 {
			back = append(back, w.waiting...)
			for _, l := range w.waiting {
				delete(u.held, l)
			}
			w.waiting, w.cut = nil, true
		}
	}
	for l := range u.held {
		keep = append(keep, l)
	}
	u.mu.Unlock()
	ctx, cancel := u.dbCtx()
	defer cancel()
	u.r.handBack(ctx, back)
	sent := time.Now()
	alive, err := u.r.heartbeatAll(ctx, keep)
	if err != nil {
		return // not proven: the timers cancel the handlers if this goes on
	}
	var lost []*Lease[T]
	u.mu.Lock()
	for _, l := range keep {
		h := u.held[l]
		if h == nil {
			continue // ended by its worker meanwhile
		}
		if exp, ok := alive[l.JobID]; ok {
			l.accepted(sent, exp)
			if h.timer != nil {
				h.timer.Reset(time.Until(l.provenUntil()))
			}
		} else {
			lost = append(lost, l)
		}
	}
	u.mu.Unlock()
	u.r.mu.Lock()
	u.r.stats.Heartbeats += uint64(len(alive))
	u.r.mu.Unlock()
	if len(lost) == 0 {
		return
	}
	errs := u.r.lostErrors(ctx, lost)
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, l := range lost {
		if h := u.held[l]; h != nil && h.cancel != nil {
			h.cancel(errs[i])
		}
	}
}
