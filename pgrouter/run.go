package pgrouter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Run: worker goroutines that claim jobs, run a Handler under a context
// canceled when the lease is lost or can no longer be proven valid, and
// complete, fail, snooze or release each job; and the Run's heartbeat
// rounds. The workers' loop is worker.go.
//
// SAME RULE on every backend, written once in internal/contract
// (worker.go) and pinned by internal/routertest's workers rows:
// WorkerOptions' checks and defaults (WorkerDefaults), when a Run starts
// no more jobs (Stopping, in stopped; its Close half is pinned by
// contract's TestStopping only, since a closing Router also refuses the
// next claim), and a batch cut at a heartbeat, so that a job leased ahead
// waits at most one interval.
//
// TUNED to this backend, where every lease operation is a round trip: a
// heartbeat round per interval, on the heartbeat connection, hands back,
// completes and extends every lease of the Run in one statement each
// (the core heartbeats each batch under its lock when it is due); the
// client's own clock bounds a lease it cannot prove valid (held.timer,
// errUnproven); and a stopping Run's last round trips are bounded
// (dbCtx, quit, runGrace) and left to the Router's background after.

// Handler processes one leased job (see leaserouter.Handler): its ctx
// is canceled as soon as the lease is lost or can no longer be proven
// valid, or at its attempt's timeout (see Run).
type Handler[T any] func(ctx context.Context, l *Lease[T]) error

// Run processes jobs with opts.Workers worker goroutines until ctx is done
// or the Router is closed, as leaserouter's Router.Run does: each worker
// leases jobs, runs h with a context canceled when the lease is lost, and
// then completes the job if h returned nil, or fails the attempt if h
// returned an error or panicked (releases the job if ctx was done
// meanwhile). If the lease was lost while h ran, Run leaves the job alone.
// An attempt is limited by the job's WithTimeout, else opts.Timeout (0: no
// limit): h's ctx then ends with context.DeadlineExceeded and a
// *leaserouter.TimeoutError cause, its lease still held. An error made by
// leaserouter.Snooze(d) snoozes the job (Lease.Snooze) instead; a negative
// d fails the attempt with an error wrapping ErrInvalidOptions.
//
// A handler may complete its own lease with CompleteTx, writing its
// result in the same transaction: once that commits, Run does nothing more
// for the job. Work in that transaction after CompleteTx is safe however
// long it takes: the lease counts as held until h returns, and a rollback
// leaves it as it was.
//
// A worker leases up to opts.Batch jobs in one statement, runs them in
// order, and completes the successful ones with its next claim. Every
// opts.HeartbeatInterval one statement extends every running lease of the
// Run, on a connection of the Router's own (a Client's, for its queues)
// outside the pool, and hands back the jobs still waiting their turn
// (pending again, the attempt not counted), so a job leased ahead never
// loses its lease while it waits. A handler's ctx is also canceled, with
// an error wrapping ErrLeaseLost, once LeaseDuration has passed since the
// last grant or heartbeat the database accepted (it cannot be reached: the
// lease can no longer be proven). Database errors do not stop Run: a
// worker backs off (50ms doubling to 1s) and goes on.
//
// Run blocks until every handler it started has returned, and returns
// within 100ms of ctx's end (or Close's start) once they have, whatever
// the database does: what is left (completions, hand-backs) the Router
// finishes in the background until Close. It returns nil when stopped by
// ctx or Close; ErrClosed if the Router is closed; and, starting nothing,
// an error wrapping ErrInvalidOptions for bad opts or a nil h. Several
// Runs, in one process or many, may share a queue. A nil ctx means
// context.Background().
func (r *Router[T]) Run(ctx context.Context, opts leaserouter.WorkerOptions, h Handler[T]) error {
	ctx = orBackground(ctx)
	// How Run works, beyond its doc:
	//
	// CompleteTx in a handler: the transaction holds the job's row with the
	// completion written, and each heartbeat round proves the lease by
	// finding that transaction still in progress on the database, so the
	// handler's ctx is not canceled for want of a heartbeat meanwhile. If the
	// transaction rolls back, heartbeats extend the lease again or, if its
	// expiry passed while the row was locked, find it lost (the ctx is
	// canceled with a *leaserouter.LeaseLostError, LostExpired) and the job is
	// retried. A snooze asked for by h is done even while Run is stopping (h
	// asked for it); a negative d fails the attempt with Snooze's error.
	//
	// Round trips. A worker's batch is one job at first and after a batch a
	// heartbeat round cut, doubling after a batch that took at most a quarter
	// of HeartbeatInterval, halving after one that took over half. A worker
	// with nothing to do takes the back half of the jobs another worker of
	// the Run leased and has not started (no round trip: the leases are the
	// Run's already), so a burst is spread. The heartbeat connection is one
	// per Router, or per Client, its rounds taking turns with those of the
	// other Runs and of KeepAlive; it is made again when it fails, so a pool
	// whose connections the handlers hold never starves it; only while no
	// connection can be made does a round use the pool. A round hands back
	// the waiting jobs, completes the finished ones not yet completed, and
	// extends every running lease in one statement, however many there are.
	// It never waits for a row another transaction holds (an operator's
	// statement, say): that lease is handed back, completed or extended by a
	// later round instead (one soon after: 10ms, doubling while the row stays
	// held, up to 1s), so one row held elsewhere never delays the heartbeats
	// of the other Runs and of KeepAlive that take turns on the connection;
	// one held by its handler's CompleteTx is proven by that transaction. So
	// a finished job never expires before it is completed (unless another
	// transaction holds its row past its expiry: no lease can be extended or
	// ended meanwhile), and a long job holds others back for at most one
	// HeartbeatInterval.
	//
	// Validity from the client's side: a grant's send time is its claim's,
	// after the wait for a pool connection, so a worker that waited for the
	// pool still gets a whole LeaseDuration; a lease found unprovable is
	// released, not failed, if the handler returns an error.
	//
	// Stopping: the last round trips (completing the finished jobs,
	// releasing, handing back the jobs not started) get 80ms once the last
	// handler returned, and what they did not do by then the Router does in
	// the background, retrying until it is done or Close ends it (a claim in
	// flight then is given up: its outcome, unknown, is resolved in the
	// background, the leases it granted handed back, the attempt not
	// counted). WorkerOptions are checked with the same checks and messages
	// on every backend.
	if err := contract.WorkerDefaults(leaserouter.ErrInvalidOptions, h == nil, r.opts.LeaseDuration,
		&opts.Workers, &opts.WorkerID, &opts.HeartbeatInterval, &opts.Batch, opts.Timeout); err != nil {
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	u := &runner[T]{r: r, h: h, opts: opts, ctx: ctx, held: make(map[*Lease[T]]*held), idle: newWaker()}
	// stopping ends when ctx does or Close starts, waking sleeping workers
	// and the heartbeat goroutine; then quit's end is armed (see armQuit).
	u.stopping, u.stop = context.WithCancel(ctx)
	u.quit, u.endQuit = context.WithCancel(context.Background())
	defer u.endQuit()
	unwatchClose := context.AfterFunc(r.closing, u.stop)
	unwatchStop := context.AfterFunc(u.stopping, func() {
		u.mu.Lock()
		u.wound = true
		u.armQuit()
		u.mu.Unlock()
	})
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
	unwatchClose()
	unwatchStop()
	u.stop()
	r.completeLater(u.orphans)  // finished, not completed by the last rounds
	r.handBackLater(u.unhanded) // not started, not handed back by the last rounds
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

	idle *waker // wakes the Run's sleeping workers when one leased a batch they may steal from

	mu       sync.Mutex
	workers  []*worker[T]
	held     map[*Lease[T]]*held // the Run's leases not yet ended: waiting or running
	orphans  []*Lease[T]         // finished leases a heartbeat round failed to complete, or found held by another transaction: the next round tries again
	unhanded []*Lease[T]         // waiting leases a heartbeat round found held by another transaction: the next round hands them back
	running  int                 // handlers running
	wound    bool                // the Run stopped: quit ends once no handler runs
	armed    bool                // quit's end is set
}

// stopped reports whether the Run is stopping (contract.Stopping): its
// ctx is done or Close has begun. Checked directly, not through
// u.stopping (a context canceled by AfterFunc, a moment later), so a
// worker never starts a job after either.
func (u *runner[T]) stopped() bool { return contract.Stopping(u.ctx, u.r.closing.Err() != nil) }

// held is what the Run knows of one of its leases.
type held struct {
	cancel context.CancelCauseFunc // running: cancels the handler's ctx; nil while waiting
	timer  *time.Timer             // running: fires when the lease can no longer be proven valid
}

// dbCtx bounds one round trip of Run's to a LeaseDuration, past which its
// answer would be of no use, and outlives Run's ctx (stopping must still
// complete, release and hand back) until quit: what the last round trips
// did not do by then is done in the Router's background.
func (u *runner[T]) dbCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(u.quit, u.r.opts.LeaseDuration)
	return graced(ctx), cancel
}

// heartbeats runs a heartbeat round each HeartbeatInterval, and one at
// once when the Run stops (handing back the waiting jobs), until done;
// then a last round completes what the workers could not. A round that
// left a hand-back or completion because another transaction held its
// row is followed by another soon (heldRetry, doubling up to
// heldRetryMax), as a statement waiting for the row would have done it as
// the row was let go.
func (u *runner[T]) heartbeats(done <-chan struct{}) {
	t := time.NewTicker(u.opts.HeartbeatInterval)
	defer t.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	wait := heldRetry
	beat := func() {
		if !u.beat() {
			wait = heldRetry
			return
		}
		retry.Reset(wait)
		wait = min(2*wait, heldRetryMax, u.opts.HeartbeatInterval)
	}
	func() { // the connection now, not at the first round: a stopping Run's last round has it
		ctx, cancel := u.dbCtx()
		defer cancel()
		if beats := &u.r.sh.beats; beats.acquire(ctx) {
			beats.get(ctx, u.r.db)
			beats.release()
		}
	}()
	stopping := u.stopping.Done()
	for {
		select {
		case <-done:
			u.beat()
			return
		case <-stopping:
			stopping = nil
			beat()
		case <-t.C:
			beat()
		case <-retry.C:
			beat()
		}
	}
}

// heldRetry is how soon a round follows one that found a row it had to
// hand back or complete held by another transaction; it doubles while
// the row stays held, up to heldRetryMax (or HeartbeatInterval, if
// shorter).
const (
	heldRetry    = 10 * time.Millisecond
	heldRetryMax = time.Second
)

// beat is one heartbeat round: the jobs of every batch still waiting
// their turn are handed back, the finished ones completed, the running
// leases extended; a lease found lost cancels its handler's ctx. It
// reports whether it left a hand-back or completion to a later round
// because another transaction held the row.
func (u *runner[T]) beat() (held bool) {
	ctx, cancel := u.dbCtx()
	defer cancel()
	// The turn on the heartbeat connection first: the leases are taken
	// from the workers only by a round that can send, and "proven until"
	// counts from the send, after this wait.
	beats := &u.r.sh.beats
	if !beats.acquire(ctx) {
		return false // other rounds held it throughout: the next round goes on; the timers cancel the handlers if this goes on
	}
	defer beats.release()
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
	back = append(back, u.unhanded...)
	u.orphans, u.unhanded = nil, nil
	for l, h := range u.held {
		// Running; one its handler completed with CompleteTx is kept too:
		// held by the handler's transaction while it is open (see pending),
		// as before once that transaction rolled back.
		if h.cancel != nil {
			keep = append(keep, l)
		}
	}
	u.mu.Unlock()
	q := beats.get(ctx, u.r.db)
	failed := func() { q = beats.failed(ctx, u.r.db, q) } // the rest of the round on a new connection
	// The skipping forms (lockForms): a row another transaction holds
	// never holds the connection the other Runs and KeepAlive share; its
	// lease is left to a later round (held).
	unhanded, err := u.r.handBackErr(ctx, q, back, true)
	if err != nil {
		failed()
	}
	held = len(unhanded) > 0
	var later []*Lease[T]
	if len(finished) > 0 {
		var ok bool
		if later, ok = u.r.completeAll(ctx, q, finished, true); ok {
			held = held || len(later) > 0
		} else {
			failed()
			later = finished // the next round tries again
		}
	}
	if len(later) > 0 || len(unhanded) > 0 {
		u.mu.Lock()
		u.orphans = append(u.orphans, later...)
		u.unhanded = append(u.unhanded, unhanded...)
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
		return held // not proven: the timers cancel the handlers if this goes on
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
		return held
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for l, e := range res.lost {
		if h := u.held[l]; h != nil && h.cancel != nil {
			h.cancel(e)
		}
	}
	return held
}
