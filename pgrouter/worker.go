package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// A Run's workers: each claims a batch, runs it in order, and hands its
// finished leases to its next claim or to the heartbeat rounds (run.go).
//
// SAME RULE on every backend, written once in internal/contract
// (worker.go) and pinned by internal/routertest's workers and snooze
// rows: the next batch's size (NextBatch), the handler's call with its
// panic caught (CallHandler), what its return does (AfterHandler) and
// the attempt's timeout (AttemptTimeout, in limit).
//
// TUNED to this backend, where a claim is a round trip: a worker's
// finished leases ride on its next claim (finished), or on the heartbeat
// round while the claim waits for a pool connection; an idle worker
// takes the back half of another's unstarted jobs, with no round trip
// (steal), where the core sizes each batch to the worker's share under
// its lock; a database error backs off and goes on. A lease whose
// validity could not be proven (errUnproven) is released, not left
// alone: only a lease a heartbeat found lost is known to be another's.

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
		fin := &finished[T]{take: w.takeDone}
		ctx, cancel := u.dbCtx()
		ls, due, err := r.claim(ctx, "Run", w.id, w.size, true, fin)
		cancel()
		if len(fin.ls) > 0 { // not completed (the round trip failed): next time
			u.mu.Lock()
			w.done = append(fin.ls, w.done...)
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
			if r.onIdle != nil {
				r.onIdle() // the claim completed this worker's finished jobs and found none ready
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
		case <-stealable:
		case <-t.C:
		}
		t.Stop()
	}
}

// finished is a worker's finished leases as its claim sees them: take
// hands them over once the claim holds a pool connection (so, while the
// claim waits for the pool, the heartbeat rounds complete them: they
// never expire waiting), ls is what the claim took and did not complete.
type finished[T any] struct {
	take func() []*Lease[T]
	ls   []*Lease[T]
}

// takeDone takes the worker's finished leases (see finished).
func (w *worker[T]) takeDone() []*Lease[T] {
	w.u.mu.Lock()
	defer w.u.mu.Unlock()
	done := w.done
	w.done = nil
	return done
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
		l.idle.Store(false) // running: Close may revoke it
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
	w.size = contract.NextBatch(w.size, u.opts.Batch, cut, took, interval)
}

// run runs the handler on l with lctx (the lease's ctx, set up by
// runWaiting) bounded by the attempt's timeout, then ends the lease as
// Run's rules say.
func (w *worker[T]) run(l *Lease[T], h *held, lctx context.Context) {
	u := w.u
	hctx, stop := u.timed(lctx, l)
	err := contract.CallHandler(u.h, hctx, l)
	stop()
	u.mu.Lock()
	h.timer.Stop()
	delete(u.held, l)
	u.running--
	u.armQuit()
	u.mu.Unlock()
	ctx, done := u.dbCtx()
	defer done()
	cause := context.Cause(lctx) // the lease's: a timeout is not a lost lease
	var lost *leaserouter.LeaseLostError
	if errors.As(cause, &lost) {
		return // lost while h ran: its new state was decided by whoever ended it
	}
	if l.completedTx(ctx) { // completed by h in a transaction that committed
		u.r.emit(l.event(leaserouter.EventCompleted, l.txCompletedAt())) // the database's instant, as every event's
		return
	}
	if !l.txTried() && !u.r.holds(l) {
		return // ended meanwhile: by h itself (Complete, Fail, Release), or found lost by a heartbeat
	}
	// The handler's return decides the end (contract.AfterHandler): a
	// snooze, a fail, a completion, or — Run's ctx done (it canceled the
	// handler's), or the lease could not be proven — a release that hands
	// the job back rather than count a failure the handler may not have
	// had. Close's drain is not a stop of the handler: it cancels none
	// before its own ctx ends (and then the lease is revoked).
	d, snoozed := leaserouter.SnoozeDelay(err)
	outcome, err := contract.AfterHandler(leaserouter.ErrInvalidOptions, err, u.ctx.Err() != nil || errors.Is(cause, errUnproven), d, snoozed)
	switch outcome {
	case contract.Snooze:
		u.r.endOrLater(ctx, l, leaserouter.LostSnoozed, func(ctx context.Context) error { return l.Snooze(ctx, d) })
	case contract.Complete:
		l.idle.Store(true) // finished: completed by the Run, never revoked
		u.mu.Lock()
		w.done = append(w.done, l)
		u.mu.Unlock()
	case contract.Release:
		u.r.endOrLater(ctx, l, leaserouter.LostReleased, l.Release)
	default:
		u.r.endOrLater(ctx, l, leaserouter.LostFailed, func(ctx context.Context) error { return l.Fail(ctx, err) })
	}
}

// errUnproven cancels a handler's ctx when its lease can no longer be
// proven valid from the client's clock.
var errUnproven = fmt.Errorf("%w: no heartbeat accepted within LeaseDuration (database unreachable?)", leaserouter.ErrLeaseLost)

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
	if len(done) == 0 {
		return
	}
	if _, ok := u.r.completeAll(ctx, u.r.db, done, false); !ok {
		u.mu.Lock()
		u.orphans = append(u.orphans, done...) // the heartbeat goroutine's last round tries again
		u.mu.Unlock()
	}
}
