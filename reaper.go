package leaserouter

import (
	"math"
	"runtime"
	"time"
)

// The reaper is the Router's background goroutine for deadlines (events
// have one of their own, event.go). It sleeps until the
// earliest deadline — a lease expiry, a scheduled job's run-at, a finished
// job's retention end — settles what is due, and sleeps again; an operation
// that adds an earlier deadline re-arms it through r.kick. There is no
// polling period: an idle pass peeks at the heads of the schedules (lease
// expiries, run-ats, retention ends, KeepAlive's heartbeats), O(1) however
// many leases are live. It does not wake for a heartbeat: its keeper's
// timer makes sure a call comes (heartbeat.go). (Compare the fixed one-second sweep of a lease table,
// whose cost grows with the table.)
//
// The reaper only makes expiry visible sooner — it wakes blocked Acquires,
// cancels the contexts of lost leases and emits events at the instant.
// Correctness never waits for it: every call settles what is due first
// (settle below), so a lease is lost at exactly its expiry.
func (r *Router[T]) reap() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// timerAt is when the timer fires, math.MaxInt64 if it is not set. A
	// kick never moves it later: a deadline that went away (a lease
	// completed) costs one idle pass when it comes, instead of a wake-up
	// of this goroutine for every lease granted on an idle router.
	timerAt := int64(math.MaxInt64)
	for {
		r.mu.Lock()
		if r.phase == phaseClosed {
			r.unlockAndDeliver()
			return
		}
		now := r.now()
		more := r.settle(now, reapBatch)
		if next := r.nextDeadline(); !more && next < timerAt {
			timer.Reset(time.Duration(next - now))
			timerAt = next
		}
		r.armed = timerAt
		var room <-chan struct{}
		if more && r.backlogFull() {
			room = r.roomChan()
		}
		r.unlockAndDeliver()
		if more {
			if room != nil {
				// A mass expiry must not outrun a slow hook: wait for room
				// before the next batch. Not once Close has begun: it may be
				// waiting, from inside a hook, for expiries to drain.
				select {
				case <-room:
				case <-r.closing:
				case <-r.kick:
				}
			} else {
				runtime.Gosched() // let waiting callers take the lock between batches
			}
			continue
		}
		select {
		case <-r.kick:
		case <-timer.C:
			timerAt = math.MaxInt64
		}
		if h := r.hooks.Load(); h != nil && h.ReaperWoke != nil {
			h.ReaperWoke() // a signal only: the pass is the same without it
		}
	}
}

// noteDue tells settle's fast path of deadline t, just added to leases,
// sched, retained or kept (or moved there). The caller holds r.mu.
func (r *Router[T]) noteDue(t int64) { r.due = min(r.due, t) }

// arm makes sure the reaper wakes by deadline t, and notes it for settle
// (noteDue). The caller holds r.mu.
func (r *Router[T]) arm(t int64) {
	r.noteDue(t)
	if t < r.armed {
		r.armed = t
		select {
		case r.kick <- struct{}{}:
		default: // a kick is already pending; the reaper will re-read armed
		}
	}
}

// nextDeadline returns the earliest pending deadline, or math.MaxInt64.
// The caller holds r.mu.
func (r *Router[T]) nextDeadline() int64 {
	next := int64(math.MaxInt64)
	if j, ok := r.leases.Peek(); ok {
		next = j.at
	}
	if j, ok := r.sched.Peek(); ok {
		next = min(next, j.at)
	}
	if j, ok := r.retained.Peek(); ok {
		next = min(next, j.at)
	}
	return next
}

// settle applies every transition due at or before now, earliest first:
// KeepAlive's heartbeats, lease expiries, scheduled jobs reaching their
// run-at, retention ends.
// limit < 0 means no limit; otherwise settle stops after limit items and
// reports whether more are due. Each item is settled once, so the cost is
// amortised O(log n) per item. The caller holds r.mu.
func (r *Router[T]) settle(now int64, limit int) (more bool) {
	if now < r.due {
		// Nothing is due: every call settles first, and this spares it
		// the four peeks below (r.due is lowered by every deadline added,
		// noteDue, and raised here when a pass finds nothing due).
		return false
	}
	for n := 0; ; n++ {
		l, hasLease := r.leases.Peek()
		s, hasScheduled := r.sched.Peek()
		p, hasRetained := r.retained.Peek()
		// Pick the earliest due item so events come out in time order.
		due := now
		kind := dueNone
		if hasLease && l.at <= due {
			due, kind = l.at, dueExpiry
		}
		if hasScheduled && s.at <= due && (kind == dueNone || s.at < due) {
			due, kind = s.at, dueRunAt
		}
		// A heartbeat is due before its lease's expiry (keptBeat), so
		// neither is settled out of turn.
		k, hasKept := r.kept.Peek()
		if hasKept && k.next <= due && (kind == dueNone || k.next < due) {
			due, kind = k.next, dueBeat
		}
		if hasRetained && p.at <= due && (kind == dueNone || p.at < due) {
			kind = duePurge
		}
		if kind == dueNone {
			r.due = int64(math.MaxInt64)
			if hasLease {
				r.due = l.at
			}
			if hasScheduled {
				r.due = min(r.due, s.at)
			}
			if hasKept {
				r.due = min(r.due, k.next)
			}
			if hasRetained {
				r.due = min(r.due, p.at)
			}
			return false
		}
		if limit >= 0 && n >= limit {
			return true
		}
		switch kind {
		case dueExpiry:
			r.expire(l)
		case dueRunAt:
			r.reachRunAt(s)
		case duePurge:
			r.purge(p)
		case dueBeat:
			r.keptBeat(k, now)
		}
	}
}

// The kinds of item settle finds due, earliest first.
const (
	dueNone   = iota
	dueExpiry // a lease's expiry
	dueRunAt  // a scheduled job's run-at
	duePurge  // a finished job's retention end
	dueBeat   // a KeepAlive's heartbeat
)

// reapBatch bounds the due items one reaper pass settles under the lock
// before it yields, so a mass expiry cannot hold the lock for long.
const reapBatch = 1024
