package leaserouter

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/hook"
)

// Heartbeats: Run's heartbeat goroutine and KeepAlive.
//
// SAME RULE on every backend, written once in internal/contract
// (worker.go) and pinned by internal/routertest's workers rows: the
// interval and its floor (HeartbeatInterval, MinHeartbeatInterval),
// KeepAlive's refusals (KeepAliveNilLease, KeepAliveInterval), and a
// batch cut at its first heartbeat, so that a job leased ahead waits at
// most one interval (the row "after a cut batch Run leases one job at a
// time").
//
// TUNED to this backend, where a heartbeat is one short lock hold: one
// goroutine per Run sleeps until the earliest heartbeat due of any
// worker's batch (on the router's clock), and heartbeats and cuts each
// batch on its own, where pgrouter's Run heartbeats every lease of the
// Run in one statement per round, on a ticker. KeepAlive runs on a
// timer and each heartbeat takes effect at the instant it was due.

// MinHeartbeatInterval is the floor of a heartbeat interval, for Run and
// KeepAlive: a shorter positive interval is raised to it (or to a quarter
// of LeaseDuration, if that is shorter), so a typo such as 1ns cannot turn
// heartbeats into a busy loop that holds the router's lock. The same on
// every backend.
const MinHeartbeatInterval = time.Millisecond

// heartbeats is Run's heartbeat goroutine: it beats every slot when due
// and sleeps until the earliest next one, or until kicked by a worker
// whose batch is due sooner, or until stop is closed. Once ctx is done or
// Close has started, it cuts every batch (cut), so that a worker stuck in
// a long handler neither holds back the completions of the jobs it
// finished nor keeps the jobs it has not started.
func (u *runner[T]) heartbeats(ctx context.Context, stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	done, closing := ctx.Done(), u.r.closing
	stopping := false
	for {
		// Published before the scan: a worker that starts a lease after
		// its slot was scanned sees it and kicks.
		u.wake.Store(math.MaxInt64)
		now := u.r.now()
		next := int64(math.MaxInt64)
		for i := range u.slots {
			s := &u.slots[i]
			s.mu.Lock()
			if s.batch != nil {
				if stopping {
					u.cut(s)
				}
				if s.due <= now {
					u.beat(s, now)
				}
				next = min(next, s.due)
			}
			s.mu.Unlock()
		}
		var fire <-chan time.Time
		if next != math.MaxInt64 {
			u.wake.Store(next)
			timer.Reset(time.Duration(next - now))
			fire = timer.C
		}
		select {
		case <-fire:
		case <-u.kick:
			timer.Stop()
		case <-done:
			done, stopping = nil, true
			timer.Stop()
		case <-closing:
			closing, stopping = nil, true
			timer.Stop()
		case <-stop:
			return
		}
	}
}

// beat cuts the slot's batch if it is still going (its first heartbeat
// is due: see Run) and heartbeats the running lease; once that lease is
// lost it gets no more heartbeats. A handler still running after Run's
// ctx is done keeps its lease, so that one winding down and returning nil
// completes its job as Run promises (Close revokes leases that outstay its
// own ctx). The caller holds s.mu.
func (u *runner[T]) beat(s *slot[T], now int64) {
	u.cut(s)
	if !s.running {
		s.due = math.MaxInt64 // between jobs: the worker ends the batch
		return
	}
	current := s.batch[s.next-1]
	if !current.handlerCtx.live() {
		s.due = math.MaxInt64
		return
	}
	if err := current.Heartbeat(nil); err != nil {
		current.handlerCtx.stop(err)
		s.due = math.MaxInt64
		return
	}
	s.due = addSat(now, u.interval)
}

// KeepAlive heartbeats l every interval in the background until the
// returned cancel func is called or the returned context is done. The
// context, derived from ctx, is canceled as soon as a heartbeat is refused
// or the lease is lost otherwise (expiry, Cancel, Close), with a cause
// wrapping ErrLeaseLost (context.Cause). When the holder itself ends the
// lease (Complete, Fail, Release, Snooze), the context is canceled at
// once, by that call before it returns, with a *LeaseLostError whose Reason is
// LostCompleted, LostFailed, LostReleased or LostSnoozed; that end is no
// refusal, even when a heartbeat races it (no EventStaleRejected, nothing
// added to Stats.StaleRejections or HeartbeatsRefused), the same on every
// backend. An interval <= 0 means
// LeaseDuration/3; a positive interval below MinHeartbeatInterval is raised
// to it, or to LeaseDuration/4 if that is shorter. An interval >=
// LeaseDuration (it could never keep the
// lease) or a nil l gives a context already canceled with a cause wrapping
// ErrInvalidOptions; a lease already lost gives one already canceled with
// its *LeaseLostError. The heartbeats are on the router's clock: the first
// is due an interval after the lease was granted or last extended (at
// once if that has passed), each next one an interval later, and each
// takes effect at the instant it is due, even when the goroutine that makes it runs late (a busy process, a
// garbage collection) or waits for the router's lock, so the lease is not
// lost to an expiry while KeepAlive keeps it; its events carry those
// instants (after a late stretch, the heartbeats the lease outlived
// without are skipped). No heartbeat due after cancel is called extends
// the lease, nor any once the context is done, however late the call
// that would apply it. cancel stops heartbeating, waits for a
// heartbeat in flight, and cancels the context; it is idempotent and safe
// to call from any goroutine. It does not end the lease: Complete, Fail or
// Release it as usual. A nil ctx means context.Background(). The context
// is canceled outside the router's lock, so ctx may be of a type of the
// caller's own: its methods never run under the lock, though they may run
// on the goroutine that ended the lease (Cancel's caller, Close, the
// reaper), where a panic in them is recovered and counted in
// Stats.CallbackPanics.
//
// This is the keep-alive of etcd's concurrency.Session, in process.
func KeepAlive[T any](ctx context.Context, l *Lease[T], interval time.Duration) (context.Context, context.CancelFunc) {
	// Heartbeats run on a timer, not a goroutine of their own, until the
	// first is due.
	if ctx == nil {
		ctx = context.Background()
	}
	if l == nil || l.r == nil {
		if v := l.view(); v != nil {
			return KeepAlive(ctx, v, interval)
		}
		return canceled(ctx, contract.KeepAliveNilLease(ErrInvalidOptions))
	}
	lease := l.r.opts.LeaseDuration
	interval = contract.HeartbeatInterval(interval, lease)
	if interval >= lease {
		return canceled(ctx, contract.KeepAliveInterval(ErrInvalidOptions, interval, lease))
	}
	kctx, k := keepAlive(ctx, l, interval)
	return kctx, func() { k.stop(context.Canceled) }
}

func canceled(ctx context.Context, cause error) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	return c, func() {}
}

// keeper heartbeats one lease. Its heartbeats are part of the router's
// schedule (r.kept, by the instant each is due): settle applies one at the
// instant it is due, before anything due later, as it applies an expiry at
// its instant, whichever call comes first. The keeper's timer only makes
// sure one comes: its beat takes the router's lock and settles. So a beat
// never lands later than it was due because the timer's goroutine ran
// late (a timer on a P that a garbage collection's mark worker occupies
// waits for the whole mark phase; golang/go#45632), or waited for the lock
// or for a mass expiry to be settled first: the lease is extended at the
// beat's instant, and a lease a KeepAlive keeps is never lost to an expiry
// while its keeper runs. Between beats no goroutine exists; a beat runs in
// the timer's goroutine.
type keeper[T any] struct {
	l        *Lease[T]
	ctx      context.Context
	cancel   context.CancelCauseFunc
	interval time.Duration
	hooks    *hook.Hooks // test hooks, read when KeepAlive starts; nil outside tests
	unwatch  func() bool // stops the watch on the parent ctx (context.AfterFunc)

	// Guarded by the router's mu.
	next      int64 // the instant of the next heartbeat, on the router's clock
	keptIndex int32 // position in r.kept; -1 when not scheduled

	mu      sync.Mutex // serialises beats with stop
	due     time.Time  // when the armed beat is due; kept only with hooks
	timer   *time.Timer
	armed   bool // timer set and its beat not started
	stopped bool
	beats   sync.WaitGroup // one per armed timer, so stop can wait for a beat in flight

	byHolder bool         // told that the holder ended the lease; guarded by the router's mu (see noteLost)
	quit     atomic.Int64 // when the cancel func was first called, on the router's clock (MaxInt64 before): settle applies no heartbeat of k due later (keptBeat)
}

func keepAlive[T any](ctx context.Context, l *Lease[T], interval time.Duration) (context.Context, *keeper[T]) {
	kctx, cancel := context.WithCancelCause(ctx)
	k := &keeper[T]{l: l, ctx: kctx, cancel: cancel, interval: interval, keptIndex: -1}
	k.quit.Store(math.MaxInt64)
	// Set before the keeper is watched: leaseLost calls it. watch
	// schedules the keeper only if kctx is not done by then, under the
	// router's lock, so unkeep, which takes that lock once kctx is done,
	// comes after and takes it off again: a keeper never stays on the
	// schedule after its context is done.
	k.unwatch = context.AfterFunc(kctx, k.unkeep)
	first, ok := l.watch(k)
	if !ok {
		k.unwatch()
		k.stopped = true // cancel has been called with the loss
		return kctx, k
	}
	k.mu.Lock()
	k.hooks = l.r.hooks.Load() // set before KeepAlive
	k.beats.Add(1)
	k.armed = true
	k.setDue(first)
	k.timer = time.AfterFunc(first, k.beat)
	k.mu.Unlock()
	return kctx, k
}

// setDue notes when the beat being armed, in wait, is due, for the Beat
// test hook. The caller holds k.mu.
func (k *keeper[T]) setDue(wait time.Duration) {
	if k.hooks != nil && k.hooks.Beat != nil {
		k.due = time.Now().Add(wait)
	}
}

// noteLost is told of the lease's end under r.mu (see Router.tell): it
// notes whether its holder ended it and takes the keeper's heartbeats off
// the router's schedule.
func (k *keeper[T]) noteLost(holder bool) {
	k.byHolder = k.byHolder || holder
	k.l.r.unschedule(k)
}

// leaseLost cancels the context with the lease's end (lostWatcher), once
// r.mu is released: canceling a context derived from the caller's ctx
// calls that ctx's Done and Value (context.removeChild), the caller's
// code if its type is its own.
func (k *keeper[T]) leaseLost(cause error) {
	k.unwatch() // unscheduled already
	k.cancel(cause)
}

func (k *keeper[T]) beat() {
	defer k.beats.Done()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = false
	if k.stopped || k.ctx.Err() != nil {
		return
	}
	var done func(error)
	if k.hooks != nil && k.hooks.Beat != nil {
		done = k.hooks.Beat(k.due)
	}
	wait, err := k.heartbeat()
	if done != nil {
		done(err)
	}
	if err != nil {
		k.stopped = true
		k.cancel(err)
		return
	}
	k.beats.Add(1)
	k.armed = true
	k.setDue(wait)
	k.timer.Reset(wait)
}

// heartbeat is a beat of the keeper's timer: it settles what is due, the
// heartbeat it is there for included (keptBeat), and checks the lease as
// Heartbeat does, refused alike. It returns how long until the next
// heartbeat is due.
func (k *keeper[T]) heartbeat() (time.Duration, error) {
	l, r := k.l, k.l.r
	r.lock()
	now := r.settleNow()
	if k.byHolder && !r.valid(l) {
		// The beat raced the holder's own Complete, Fail, Release or
		// Snooze, which told this keeper: no refusal (contract.EndedByHolder),
		// nothing counted or emitted.
		err := r.lostError(l)
		r.unlockAndDeliver()
		return 0, err
	}
	_, err := r.holding(l, now)
	if err != nil {
		if r.phase != phaseClosed {
			r.stats.HeartbeatsRefused++
		}
		r.unlockAndDeliver()
		return 0, err
	}
	wait := k.interval
	if k.keptIndex >= 0 {
		wait = time.Duration(k.next - now) // > 0: settled at now
	}
	r.unlockAndDeliver()
	return wait, nil
}

// keptBeat is settle's step, at now, for a keeper whose heartbeat is due:
// while k's lease is valid it is extended as Heartbeat extends it, at the
// instant the heartbeat was due, and the next one is scheduled an interval
// later; otherwise k leaves the schedule (its timer's beat will find the
// lease lost). The caller holds r.mu and settles in time order, so the
// lease's expiry, later than the heartbeat, is not settled before it.
func (r *Router[T]) keptBeat(k *keeper[T], now int64) {
	quit := k.quit.Load()
	if !r.valid(k.l) || k.next > quit || k.ctx.Err() != nil {
		// Lost, or stopped while stop or unkeep waits for the lock to
		// take k off the schedule: no heartbeat due after the cancel func
		// was called (quit), none once the context is done (kctx is the
		// package's own context: Err runs no caller's code).
		r.unschedule(k)
		return
	}
	now = min(now, quit) // a heartbeat due before cancel was called still lands
	at, every := k.next, int64(k.interval)
	// Settled late (the lock was held, or no call came meanwhile): the
	// heartbeats due before now that the lease outlives without are
	// skipped, to the last one before the lease's expiry or now,
	// whichever is earlier. So a settle late by less than a lease lands
	// one or two, not one per interval; a later one, one or two per
	// lease it was late by (each extension lets the lease live to the
	// next beat). Jumping to the last beat before now in one step would
	// extend the lease at an instant later than items settle has yet to
	// apply (other leases' expiries, run-ats), and events would leave
	// time order.
	if last := min(now, k.l.j.at-1); last-at >= every {
		k.next = at + (last-at)/every*every
		r.kept.Fix(int(k.keptIndex))
		r.noteDue(k.next)
		return
	}
	r.extend(k.l, at, nil)
	k.next = addSat(at, k.interval)
	r.kept.Fix(int(k.keptIndex))
	r.noteDue(k.next)
}

// scheduleKept puts k's first heartbeat on the router's schedule, at now
// or later, and returns how long until it is due: an interval after the
// lease was last granted or extended, as if k had kept it since, so a
// KeepAlive its caller made late in the lease still keeps it, but never
// more than an interval from now. The caller holds r.mu and has settled at
// now; k's lease is valid.
func (r *Router[T]) scheduleKept(k *keeper[T], now int64) time.Duration {
	since := k.l.j.at - int64(r.opts.LeaseDuration) // the last grant or heartbeat
	k.next = min(addSat(now, k.interval), max(now, since+int64(k.interval)))
	r.kept.Push(k)
	r.noteDue(k.next)
	return time.Duration(k.next - now)
}

// unschedule takes k off the router's schedule of heartbeats, if it is on
// it. The caller holds r.mu.
func (r *Router[T]) unschedule(k *keeper[T]) {
	if k.keptIndex >= 0 {
		r.kept.Remove(int(k.keptIndex))
	}
}

// unkeep takes k off the router's schedule (its context is done).
func (k *keeper[T]) unkeep() {
	r := k.l.r
	r.mu.Lock()
	r.unschedule(k)
	k.l.unwatch(k)
	r.unlockAndDeliver()
}

func keptBefore[T any](a, b *keeper[T]) bool  { return a.next < b.next }
func setKeptIndex[T any](k *keeper[T], i int) { k.keptIndex = int32(i) }

// stop ends heartbeating, waits for a beat in flight and cancels the
// context with cause (a no-op if it was already canceled).
func (k *keeper[T]) stop(cause error) {
	// Before k.mu, which a beat waiting for r.mu holds: settle applies
	// no heartbeat due from here on.
	k.quit.CompareAndSwap(math.MaxInt64, k.l.r.now())
	k.mu.Lock()
	k.stopped = true
	if k.armed && k.timer.Stop() {
		k.armed = false
		k.beats.Done() // the beat will never run
	}
	k.mu.Unlock()
	k.beats.Wait()
	k.unwatch()
	k.unkeep() // no heartbeat after stop returns
	k.cancel(cause)
}
