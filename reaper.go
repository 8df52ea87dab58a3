package leaserouter

import (
	"errors"
	"math"
	"runtime"
	"time"
)

// The reaper is the Router's one background goroutine. It sleeps until the
// earliest deadline — a lease expiry, a scheduled job's run-at, a finished
// job's retention end — settles what is due, and sleeps again; an operation
// that adds an earlier deadline re-arms it through r.kick. There is no
// polling period: an idle pass peeks at three heads, O(1) however many
// leases are live. (Compare the fixed one-second sweep of a lease table,
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
			r.mu.Unlock()
			return
		}
		if r.hooks != nil && r.hooks.ReaperChose != nil {
			r.reaperChose()
		}
		now := r.now()
		more := r.settle(now, reapBatch)
		if next := r.nextDeadline(); !more && next < timerAt {
			timer.Reset(time.Duration(next - now))
			timerAt = next
		}
		r.armed = timerAt
		var room chan struct{}
		if more && r.backlogFull() {
			room = r.roomChan()
		}
		r.unlock()
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
	}
}

// reaperChose calls the test hook with the first expired lease, if any,
// with r.mu released meanwhile. The caller holds r.mu; settle re-checks
// everything afterwards, as the reaper of a lease table must re-check a
// snapshot before it requeues.
func (r *Router[T]) reaperChose() {
	j, ok := r.leases.Peek()
	if !ok || j.at > r.now() {
		return
	}
	id, tok := j.id, j.token
	r.unlock()
	r.hooks.ReaperChose(id, uint64(tok))
	r.mu.Lock()
}

// arm makes sure the reaper wakes by deadline t. The caller holds r.mu.
func (r *Router[T]) arm(t int64) {
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
	if r.retHead != nil {
		next = min(next, r.retHead.at)
	}
	return next
}

// settle applies every transition due at or before now, earliest first:
// lease expiries, scheduled jobs reaching their run-at, retention ends.
// limit < 0 means no limit; otherwise settle stops after limit items and
// reports whether more are due. Each item is settled once, so the cost is
// amortised O(log n) per item. The caller holds r.mu.
func (r *Router[T]) settle(now int64, limit int) (more bool) {
	for n := 0; ; n++ {
		l, lok := r.leases.Peek()
		s, sok := r.sched.Peek()
		p := r.retHead
		// Pick the earliest due item so events come out in time order.
		due := now
		kind := 0
		if lok && l.at <= due {
			due, kind = l.at, 1
		}
		if sok && s.at <= due && (kind == 0 || s.at < due) {
			due, kind = s.at, 2
		}
		if p != nil && p.at <= due && (kind == 0 || p.at < due) {
			kind = 3
		}
		if kind == 0 {
			return false
		}
		if limit >= 0 && n >= limit {
			return true
		}
		switch kind {
		case 1:
			r.expire(l)
		case 2:
			r.sched.Pop()
			r.makeReady(s, s.at)
		case 3:
			r.purge(p)
		}
	}
}

// expire ends a lease at its expiry instant, as if at that instant: the
// job becomes pending with that instant as its ready time, or dead.
func (r *Router[T]) expire(j *job[T]) {
	at, l := j.at, j.lease
	r.stats.Expirations++
	j.lastErr = "lease expired"
	r.endLease(j, endExpired, true)
	setHeld(r.emit(EventLeaseExpired, at, j, l, l.Token, nil), l.granted, at)
	r.requeue(j, at, at)
}

// requeue makes a job whose lease ended by expiry or release pending at
// readyAt, or dead at "at" if it has used all its attempts.
func (r *Router[T]) requeue(j *job[T], readyAt, at int64) {
	if j.attempt >= j.maxAtt {
		r.kill(j, at)
		return
	}
	r.makeReady(j, readyAt)
}

// kill makes a job dead (StateFailed).
func (r *Router[T]) kill(j *job[T], at int64) {
	if j.lastErr == "" {
		j.lastErr = "attempts exhausted"
	}
	r.stats.Dead++
	var err error
	if r.hooked {
		err = errors.New(j.lastErr)
	}
	r.emit(EventDead, at, j, nil, j.token, err)
	r.finish(j, StateFailed, at)
}

// makeReady makes j pending with ready time at and wakes one waiter.
func (r *Router[T]) makeReady(j *job[T], at int64) {
	r.setState(j, StatePending)
	j.at = at
	j.updated = max(j.updated, at)
	r.ready.Push(j)
	r.wakeOne()
}

// schedule makes j scheduled until runAt, or pending at once (ready time
// now) if runAt is not after now.
func (r *Router[T]) schedule(j *job[T], runAt, now int64) {
	if runAt <= now {
		r.makeReady(j, now)
		return
	}
	r.setState(j, StateScheduled)
	j.at = runAt
	j.updated = now
	r.sched.Push(j)
	r.arm(runAt)
}

// finish moves j to a terminal state at "at" and into retention, or drops
// it at once when Retention < 0.
func (r *Router[T]) finish(j *job[T], s State, at int64) {
	r.setState(j, s)
	j.updated = max(j.updated, at)
	j.at = at
	if r.opts.Retention < 0 {
		r.purge(j)
		return
	}
	j.at = addSat(at, r.opts.Retention)
	if r.retTail == nil {
		r.retHead = j
	} else {
		r.retTail.next = j
	}
	r.retTail = j
	r.arm(j.at)
}

// purge drops a finished job at j.at (its purge instant). With Retention
// >= 0 it is the retention queue's head.
func (r *Router[T]) purge(j *job[T]) {
	if r.retHead == j {
		r.retHead = j.next
		if r.retHead == nil {
			r.retTail = nil
		}
		j.next = nil
	}
	r.jobs.Delete(j, j.hash)
	r.counts[j.state]--
	r.stats.Purged++
	r.emit(EventPurged, j.at, j, nil, j.token, nil)
}

// setState moves j to state s, keeping the per-state counts, and closes
// the drain channel when the last lease ends during Close.
func (r *Router[T]) setState(j *job[T], s State) {
	r.counts[j.state]--
	r.counts[s]++
	if j.state == StateLeased && r.drained != nil && r.counts[StateLeased] == 0 {
		close(r.drained)
		r.drained = nil
	}
	j.state = s
}
