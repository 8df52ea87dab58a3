package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
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
// each worker leases jobs, runs h with a context derived from ctx and
// canceled as soon as the lease is lost, and then completes the job (h
// returned nil), fails it (h returned an error or panicked), or, when ctx
// was done meanwhile, completes it if h returned nil and releases it
// otherwise. If the lease was lost while h ran, Run leaves the job alone.
// A handler may complete its own lease with CompleteTx, writing its
// result in the same transaction; when that committed, Run does nothing
// more for the job, otherwise it goes on as above. Work in that
// transaction after CompleteTx and before the commit is allowed, however
// long it takes: the lease counts as held until the handler returns (the
// transaction holds the job's row with the completion written, and each
// heartbeat round proves the lease by finding that transaction still in
// progress on the database), so the handler's ctx is not canceled for
// want of a heartbeat meanwhile. If the transaction rolls back, the lease
// is as it was before CompleteTx: heartbeats extend it again or, if its
// expiry passed while the row was held, find it lost (the ctx is canceled
// with a *leaserouter.LeaseLostError, LostExpired) and the job is retried.
//
// Round trips. A worker leases up to opts.Batch jobs in one statement
// (one at first, doubling after a batch that took at most a quarter of
// HeartbeatInterval, halving after one that took over half), runs them in
// order, and completes those whose handler returned nil in the same round
// trip as its next lease. A worker with nothing to do takes the back half
// of the jobs another worker of the Run leased and has not started (no
// round trip: the leases are the Run's already), so a burst is spread.
// One heartbeat goroutine per Run, on a connection of its own (made
// again when it fails, so a pool whose connections the handlers hold
// never starves it; only while no connection can be made does a round use
// the pool), runs a round every opts.HeartbeatInterval: the jobs still
// waiting their turn are handed back unstarted (pending again in their
// old place, the lease not counted as an attempt), the finished ones not
// yet completed are completed, and every running lease is extended in one
// statement, however many there are (rows another transaction holds are
// skipped, never waited for: one held by its handler's CompleteTx is
// proven by that transaction instead, as above). So a job leased
// ahead waits at most one HeartbeatInterval and never loses its lease
// while it waits, a finished one never expires before it is completed,
// and a long job holds others back for at most one HeartbeatInterval.
// When ctx is done or Close starts, workers start no more jobs and the
// waiting ones are handed back at once.
//
// Validity from the client's side: a handler's ctx is canceled with a
// *leaserouter.LeaseLostError when a heartbeat finds the lease lost, and
// with an error wrapping ErrLeaseLost when LeaseDuration has passed, on
// the client's monotonic clock, since the send time of the last accepted
// grant or heartbeat (the database unreachable: the lease can no longer
// be proven valid; a grant's send time is its claim's, after the wait for
// a pool connection, so a worker that waited for the pool still gets a
// whole LeaseDuration); the job is then released, not failed, if the handler
// returns an error. Database errors do not stop Run: a worker backs off
// (50ms doubling to 1s) and goes on when the database is back.
//
// Run blocks until every handler it started has returned and every
// goroutine it started has ended, and returns within 100ms of its ctx's
// end (or Close's start) once its handlers have returned, whatever the
// database does: its last round trips (completing the finished jobs,
// releasing, handing back the jobs not started) get 80ms once the last
// handler returned, and what they did not do by then the Router does in
// the background, retrying until it is done or Close ends it (a claim in
// flight then is given up: its outcome, unknown, is resolved in the
// background, the leases it granted handed back, the attempt not
// counted). It returns nil when stopped by ctx or
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
	u := &runner[T]{r: r, h: h, opts: opts, ctx: ctx, held: make(map[*Lease[T]]*held), idle: newWaker()}
	u.stopping, u.stop = context.WithCancel(context.Background())
	u.quit, u.endQuit = context.WithCancel(context.Background())
	defer u.endQuit()
	go func() { // wakes sleeping workers and the heartbeat goroutine when the Run stops
		select {
		case <-ctx.Done():
		case <-r.closing:
		case <-u.stopping.Done():
		}
		u.stop()
		u.mu.Lock()
		u.wound = true
		u.armQuit()
		u.mu.Unlock()
	}()
	var beats, workers sync.WaitGroup
	beatsDone := make(chan struct{})
	beats.Go(func() { u.heartbeats(beatsDone) })
	u.mu.Lock()
	for i := range opts.Workers {
		w := &worker[T]{u: u, id: fmt.Sprintf("%s-%d", opts.WorkerID, i), size: 1}
		u.workers = append(u.workers, w)
		workers.Go(w.work)
	}
	u.mu.Unlock()
	workers.Wait()
	close(beatsDone)
	beats.Wait()
	u.stop()
	r.completeLater(u.orphans) // finished, not completed by the last rounds
	return nil
}

// armQuit ends quit runGrace from now once the Run stops and no handler
// runs. The caller holds u.mu.
func (u *runner[T]) armQuit() {
	if u.wound && u.running == 0 && !u.armed {
		u.armed = true
		time.AfterFunc(runGrace, u.endQuit)
	}
}

// runner is one Run.
type runner[T any] struct {
	r    *Router[T]
	h    Handler[T]
	opts leaserouter.WorkerOptions
	ctx  context.Context // Run's: handlers' contexts derive from it

	stopping context.Context // done when ctx is done or Close starts (wakes sleepers; stopped() is the test)
	stop     context.CancelFunc
	quit     context.Context // done runGrace after the Run stopped and its last handler returned: bounds its last round trips
	endQuit  context.CancelFunc

	conn ownConn // the heartbeat goroutine's own connection
	idle *waker  // wakes the Run's sleeping workers when one leased a batch they may steal from

	mu      sync.Mutex
	workers []*worker[T]
	held    map[*Lease[T]]*held // the Run's leases not yet ended: waiting or running
	orphans []*Lease[T]         // finished leases a heartbeat round failed to complete: the next round tries again
	running int                 // handlers running
	wound   bool                // the Run stopped: quit ends once no handler runs
	armed   bool                // quit's end is set
}

// stopped reports whether the Run is stopping: its ctx is done or Close
// has begun. Checked directly, so a worker never starts a job after.
func (u *runner[T]) stopped() bool {
	if u.ctx.Err() != nil {
		return true
	}
	select {
	case <-u.r.closing:
		return true
	default:
		return false
	}
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
	done    []*Lease[T] // handlers returned nil: completed with the next claim, or by the next heartbeat; guarded by u.mu
}

// dbCtx bounds one round trip of Run's to a LeaseDuration, past which its
// answer would be of no use, and outlives Run's ctx (stopping must still
// complete, release and hand back) until quit: what the last round trips
// did not do by then is done in the Router's background.
func (u *runner[T]) dbCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(u.quit, u.r.opts.LeaseDuration)
	return graced(ctx), cancel
}

// work is a worker's loop.
func (w *worker[T]) work() {
	u, r := w.u, w.u.r
	backoff := time.Duration(0)
	for {
		if u.stopped() {
			w.flush()
			return
		}
		if w.steal() {
			w.runWaiting()
			continue
		}
		woken, stealable := r.wake.wait(), u.idle.wait()
		// Wait for room in the event backlog before taking the finished
		// leases: while they are the worker's, the heartbeat rounds cannot
		// complete them.
		_ = r.ev.awaitRoom(u.stopping)
		u.mu.Lock()
		done := w.done
		w.done = nil
		u.mu.Unlock()
		ctx, cancel := u.dbCtx()
		ls, due, err := r.claim(ctx, "Run", w.id, w.size, true, &done)
		cancel()
		if len(done) > 0 { // not completed (the round trip failed): next time
			u.mu.Lock()
			w.done = append(done, w.done...)
			u.mu.Unlock()
		}
		var wait time.Duration
		switch {
		case err == nil:
			backoff = 0
			if len(ls) > 1 {
				u.idle.broadcast() // idle workers of the Run take part of it
			}
			w.batch(ls, time.Now())
			continue
		case errors.Is(err, leaserouter.ErrNoJob):
			backoff = 0
			wait = r.waitFor(due)
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
		case <-stealable:
		case <-t.C:
		}
		t.Stop()
	}
}

// steal makes the back half of the longest waiting tail of another
// worker of the Run this worker's batch (in one critical section, so the
// heartbeat sees the leases waiting all along), and reports whether there
// was one: a burst leased by one worker is spread over the idle ones (no
// round trip: the leases are the Run's already).
func (w *worker[T]) steal() bool {
	u := w.u
	u.mu.Lock()
	defer u.mu.Unlock()
	var victim *worker[T]
	for _, o := range u.workers {
		if o != w && len(o.waiting) >= 2 && (victim == nil || len(o.waiting) > len(victim.waiting)) {
			victim = o
		}
	}
	if victim == nil {
		return false
	}
	k := len(victim.waiting) / 2
	w.waiting, w.started, w.cut = slices.Clone(victim.waiting[k:]), victim.started, false
	victim.waiting = victim.waiting[:k]
	return true
}

// batch makes ls, leased at started, the worker's batch, and runs it.
func (w *worker[T]) batch(ls []*Lease[T], started time.Time) {
	u := w.u
	u.mu.Lock()
	w.waiting, w.started, w.cut = ls, started, false
	for _, l := range ls {
		u.held[l] = &held{}
	}
	u.mu.Unlock()
	w.runWaiting()
}

// runWaiting runs the worker's waiting jobs in order (until the Run
// stops: the rest are handed back by flush), then adapts the next batch's
// size. A job leaves the waiting list and becomes running in one critical
// section, so every heartbeat round sees it as one or the other.
func (w *worker[T]) runWaiting() {
	u := w.u
	for {
		u.mu.Lock()
		if len(w.waiting) == 0 || u.stopped() {
			break
		}
		l := w.waiting[0]
		w.waiting = w.waiting[1:]
		h := u.held[l]
		hctx, cancel := context.WithCancelCause(u.ctx)
		h.cancel = cancel
		u.running++
		h.timer = time.AfterFunc(time.Until(l.provenUntil()), func() { cancel(errUnproven) })
		u.mu.Unlock()
		w.run(l, h, hctx)
		cancel(nil)
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

// run runs the handler on l with hctx (set up by runWaiting), then ends
// the lease as Run's rules say.
func (w *worker[T]) run(l *Lease[T], h *held, hctx context.Context) {
	u := w.u
	err := u.call(hctx, l)
	u.mu.Lock()
	h.timer.Stop()
	delete(u.held, l)
	u.running--
	u.armQuit()
	u.mu.Unlock()
	ctx, done := u.dbCtx()
	defer done()
	cause := context.Cause(hctx)
	var lost *leaserouter.LeaseLostError
	if errors.As(cause, &lost) {
		return // lost while h ran: its new state was decided by whoever ended it
	}
	if l.completedTx(ctx) { // completed by h in a transaction that committed
		u.r.ev.add(l.event(leaserouter.EventCompleted, time.Now()))
		return
	}
	if !l.txTried() && !u.r.holds(l) {
		return // ended meanwhile: by h itself (Complete, Fail, Release), or found lost by a heartbeat
	}
	if err == nil {
		u.mu.Lock()
		w.done = append(w.done, l)
		u.mu.Unlock()
		return
	}
	if u.stopped() || errors.Is(cause, errUnproven) {
		// Stopping, or the lease could not be proven: hand the job back
		// rather than count a failure the handler may not have had.
		u.r.endOrLater(ctx, l, leaserouter.LostReleased, l.Release)
		return
	}
	u.r.endOrLater(ctx, l, leaserouter.LostFailed, func(ctx context.Context) error { return l.Fail(ctx, err) })
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
	waiting, done := w.waiting, w.done
	w.waiting, w.done = nil, nil
	for _, l := range waiting {
		delete(u.held, l)
	}
	u.mu.Unlock()
	ctx, cancel := u.dbCtx()
	defer cancel()
	if !u.r.handBack(ctx, u.r.db, waiting) {
		u.r.handBackLater(waiting)
	}
	if len(done) > 0 && !u.r.completeAll(ctx, u.r.db, done) {
		u.mu.Lock()
		u.orphans = append(u.orphans, done...) // the heartbeat goroutine's last round tries again
		u.mu.Unlock()
	}
}

// heartbeats runs a heartbeat round each HeartbeatInterval, and one at
// once when the Run stops (handing back the waiting jobs), until done;
// then a last round completes what the workers could not.
func (u *runner[T]) heartbeats(done <-chan struct{}) {
	t := time.NewTicker(u.opts.HeartbeatInterval)
	defer t.Stop()
	defer u.conn.close()
	func() { // the connection now, not at the first round: a stopping Run's last round has it
		ctx, cancel := u.dbCtx()
		defer cancel()
		u.conn.get(ctx, u.r.db)
	}()
	stopping := u.stopping.Done()
	for {
		select {
		case <-done:
			u.beat()
			return
		case <-stopping:
			stopping = nil
			u.beat()
		case <-t.C:
			u.beat()
		}
	}
}

// beat is one heartbeat round: the jobs of every batch still waiting
// their turn are handed back, the finished ones completed, the running
// leases extended; a lease found lost cancels its handler's ctx.
func (u *runner[T]) beat() {
	u.mu.Lock()
	var back, finished, keep []*Lease[T]
	for _, w := range u.workers {
		if len(w.waiting) > 0 {
			back = append(back, w.waiting...)
			for _, l := range w.waiting {
				delete(u.held, l)
			}
			w.waiting, w.cut = nil, true
		}
		finished = append(finished, w.done...)
		w.done = nil
	}
	finished = append(finished, u.orphans...)
	u.orphans = nil
	for l, h := range u.held {
		// Running; one its handler completed with CompleteTx is kept too:
		// held by the handler's transaction while it is open (see pending),
		// as before once that transaction rolled back.
		if h.cancel != nil {
			keep = append(keep, l)
		}
	}
	u.mu.Unlock()
	ctx, cancel := u.dbCtx()
	defer cancel()
	q := u.conn.get(ctx, u.r.db)
	failed := func() { q = u.conn.failed(ctx, u.r.db, q) } // the rest of the round on a new connection
	if !u.r.handBack(ctx, q, back) {
		failed()
	}
	if len(finished) > 0 && !u.r.completeAll(ctx, q, finished) {
		failed()
		u.mu.Lock()
		u.orphans = append(u.orphans, finished...)
		u.mu.Unlock()
	}
	sent := time.Now()
	res, err := u.r.heartbeatAll(ctx, q, keep, func(l *Lease[T]) bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.held[l] != nil
	})
	if err != nil {
		failed()
		return // not proven: the timers cancel the handlers if this goes on
	}
	u.mu.Lock()
	for l, exp := range res.alive {
		if h := u.held[l]; h != nil {
			l.accepted(sent, exp)
			if h.timer != nil {
				h.timer.Reset(time.Until(l.provenUntil()))
			}
		}
	}
	u.mu.Unlock()
	if len(res.lost) == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for l, e := range res.lost {
		if h := u.held[l]; h != nil && h.cancel != nil {
			h.cancel(e)
		}
	}
}
