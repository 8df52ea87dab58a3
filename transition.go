package leaserouter

import (
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/order"
)

// The job state machine: the changes of a job's state, each a function
// called with r.mu held, after the caller has settled what is due, that
// keeps the per-state counts, the heaps and the events in step. The
// callers (lease.go, router.go, close.go, reaper.go, batch.go, worker.go,
// admin.go, bulk.go, snooze.go) check and lock. The changes made here:
//
//	insert       new -> pending or scheduled (Enqueue)
//	grant        pending -> leased (Acquire, Run)
//	complete     leased -> succeeded (Lease.Complete, Run)
//	fail         leased -> scheduled, pending or dead (Lease.Fail)
//	release      leased -> pending or dead (Lease.Release)
//	expire       leased -> pending or dead (the lease's expiry)
//	handBack     leased -> pending, no attempt counted (Run)
//	revokeLease  leased -> pending (Close, after draining)
//	cancel       pending, scheduled or leased -> canceled (Cancel)
//	reachRunAt   scheduled -> pending (its run-at)
//	purge        finished -> dropped (Retention)
//
// Three changes live beside the call they serve, made of this file's
// common steps:
//
//	retryLocked   finished -> pending, in a fresh record (Retry, RetryMany: admin.go)
//	deleteLocked  pending, scheduled or finished -> dropped (Delete, DeleteMany: admin.go)
//	snooze        leased -> scheduled or pending, no attempt counted (Lease.Snooze, Run: snooze.go)
//
// requeue, kill, makeReady, schedule, finish, drop and forget are their
// common steps; endLease ends a leased job's lease on its way out of
// StateLeased.

// grant leases the first ready job, or returns ErrNoJob. The Lease is l if
// not nil (a batch's, allocated outside the lock), else a new one; a
// non-nil was gets how the job was ready before (Run keeps it for
// handBack). The caller holds r.mu and has settled.
func (r *Router[T]) grant(workerID string, now int64, l *Lease[T], was *readyAt) (*Lease[T], error) {
	if r.grantable() == 0 {
		return nil, ErrNoJob
	}
	if !r.nextToken() {
		// Every waiter must learn it too (Run's workers stop on it): the
		// wake-up for this job goes on, and each waiter passes it on.
		r.wakeOne()
		return nil, ErrTokensExhausted
	}
	j, _ := r.ready.Pop()
	readyAt, requeued := j.at, j.ended == endExpired
	if was != nil {
		*was = makeReadyAt(readyAt, requeued)
	}
	r.setState(j, StateLeased)
	j.attempt++
	j.token = r.lastToken
	j.at = addSat(now, r.opts.LeaseDuration)
	j.updated = now
	j.ended = endNone
	r.leases.Push(j)
	r.arm(j.at)
	if l == nil {
		l = new(Lease[T])
	}
	l.JobID, l.Payload, l.Attempt, l.Token = j.id, j.payload, int(j.attempt), j.token
	l.WorkerID, l.r, l.j, l.granted, l.expiry = workerID, r, j, now, j.at
	l.Progress = j.progress // shared until the caller has released r.mu: ownProgress
	j.lease = l
	r.stats.LeasesGranted++
	if e := r.emit(EventLeaseAcquired, now, j, l, j.token, nil); e != nil {
		e.dur, e.requeued = now-readyAt, requeued
	}
	return l, nil
}

// nextToken makes r.lastToken the next fencing token and reports
// whether there was one (tokens fit in an int64). A lone Router counts
// under r.mu; a Client's queues draw from their shared source, so that
// tokens increase across every queue of the Client. The caller holds
// r.mu.
func (r *Router[T]) nextToken() bool {
	if r.tokens != nil {
		t, ok := r.tokens.next()
		r.lastToken = max(r.lastToken, t)
		return ok
	}
	if r.lastToken >= maxToken {
		return false
	}
	r.lastToken++
	return true
}

// tokenSource is the fencing tokens of a Client's queues: one counter,
// so a lease granted later in any queue has a higher token.
type tokenSource struct{ last atomic.Uint64 }

// seed raises the source to t, if it is below: every token it issues is
// then above t (each queue's TokenFloor and the wall clock at its New).
func (s *tokenSource) seed(t Token) {
	for {
		cur := s.last.Load()
		if Token(cur) >= t || s.last.CompareAndSwap(cur, uint64(t)) {
			return
		}
	}
}

// next returns the next token, or false if none fits in an int64.
func (s *tokenSource) next() (Token, bool) {
	for {
		t := s.last.Load()
		if Token(t) >= maxToken {
			return 0, false
		}
		if s.last.CompareAndSwap(t, t+1) {
			return Token(t + 1), true
		}
	}
}

// ownProgress gives l a copy of the checkpoint grant shared with its
// job's record, so that no hold of the lock grows with checkpoints (a
// stored checkpoint is never written again: see row). Every caller of
// grant calls it once it has released r.mu, before l reaches anyone else.
func (l *Lease[T]) ownProgress() {
	if l.Progress != nil {
		l.Progress = slices.Clone(l.Progress)
	}
}

// complete makes l's job succeeded. The caller holds r.mu and has checked
// that l is valid.
func (r *Router[T]) complete(j *job[T], l *Lease[T], now int64) {
	r.endLease(j, endCompleted)
	r.tally(contract.TallyCompleted, now)
	setHeld(r.emit(EventCompleted, now, j, l, l.Token, nil), l.granted, now)
	r.finish(j, StateSucceeded, now)
}

// fail ends l's lease with a failed attempt (Lease.Fail): the job's
// LastError becomes text, a record of the attempt joins its Errors, and
// the failed event carries cause; the job is
// dead if permanent or out of attempts, else scheduled again after delay
// (pending at once if delay <= 0). The caller holds r.mu and has checked
// that l is valid.
func (r *Router[T]) fail(j *job[T], l *Lease[T], now int64, text string, cause error, permanent bool, delay time.Duration) {
	j.recordFailure(AttemptError{Attempt: int(j.attempt), At: r.timeAt(now), Worker: l.WorkerID, Error: text})
	r.endLease(j, endFailed)
	r.tally(contract.TallyFailed, now)
	setHeld(r.emit(EventFailed, now, j, l, l.Token, cause), l.granted, now)
	if permanent || j.attempt >= j.maxAttempts {
		r.kill(j, now)
	} else {
		r.stats.Retries++
		r.schedule(j, addSat(now, max(delay, 0)), now)
		r.emit(EventRetryScheduled, now, j, l, l.Token, nil)
	}
}

// release ends l's lease at its holder's request (Lease.Release): the
// attempt counts, and the job is pending at once, or dead if it has used
// all its attempts. The caller holds r.mu and has checked that l is valid.
func (r *Router[T]) release(j *job[T], l *Lease[T], now int64) {
	r.endLease(j, endReleased)
	setHeld(r.emit(EventReleased, now, j, l, l.Token, nil), l.granted, now)
	r.requeue(j, now, now)
}

// expire ends a lease at its expiry instant, as if at that instant: the
// job becomes pending with that instant as its ready time, or dead.
func (r *Router[T]) expire(j *job[T]) {
	at, l := j.at, j.lease
	r.stats.Expirations++
	r.tally(contract.TallyExpired, at)
	j.recordFailure(AttemptError{Attempt: int(j.attempt), At: r.timeAt(at), Worker: l.WorkerID, Error: "lease expired"})
	r.endLease(j, endExpired)
	setHeld(r.emit(EventLeaseExpired, at, j, l, l.Token, nil), l.granted, at)
	r.requeue(j, at, at)
}

// handBack ends a lease Run granted ahead of its turn and never gave to a
// handler (see Run): the job is pending again as it was before that lease
// (ready), so it keeps its place in the order and its next lease_acquired
// event says what the previous one would have, and the lease is not
// counted as an attempt. Its event is EventReleased. The caller holds r.mu
// and has checked that l is valid.
func (r *Router[T]) handBack(j *job[T], l *Lease[T], now int64, ready readyAt) {
	r.endLease(j, endReleased)
	setHeld(r.emit(EventReleased, now, j, l, l.Token, nil), l.granted, now)
	j.attempt--
	j.updated = now
	at, requeued := ready.get()
	if requeued {
		j.ended = endExpired // as before the lease: ready since an expiry
	}
	r.makeReady(j, at)
}

// revokeLease ends a lease Close found still held after draining: the job
// is pending again at now, with the attempt counted but never dead for it
// (see Close), its watchers are told, and its event is EventReleased
// carrying ErrClosed. The caller holds r.mu and has settled at now.
func (r *Router[T]) revokeLease(j *job[T], now int64) {
	l := j.lease
	r.endLease(j, endRevoked)
	setHeld(r.emit(EventReleased, now, j, l, l.Token, ErrClosed), l.granted, now)
	r.makeReady(j, now)
}

// cancel makes an unfinished job canceled (Cancel); a leased job's lease
// is lost at once, its watchers told. The caller holds r.mu, has settled
// at now and has checked that j is not finished.
func (r *Router[T]) cancel(j *job[T], now int64) {
	// The event carries the job's latest token even when it is not leased
	// (an expired lease settled just now): no event of a job carries a
	// token older than its latest lease's.
	switch j.state {
	case StateLeased:
		l := j.lease
		r.endLease(j, endCanceled)
		setHeld(r.emit(EventCanceled, now, j, l, l.Token, nil), l.granted, now)
	case StatePending, StateScheduled:
		if j.state == StatePending {
			r.ready.Remove(int(j.heapIndex))
		} else {
			r.sched.Remove(int(j.heapIndex))
		}
		r.emit(EventCanceled, now, j, nil, j.token, nil)
	default: // finished: Cancel refuses it before calling
		return
	}
	r.finish(j, StateCanceled, now)
}

// readyAt is how a pending job was ready: its ready time (never negative
// on the router's clock), and whether it was ready again because a lease
// expired (Event.Requeued), in 8 bytes: a requeued job's time is stored
// complemented. One is kept per lease of Run's batches.
type readyAt int64

func makeReadyAt(at int64, requeued bool) readyAt {
	if requeued {
		return readyAt(^at)
	}
	return readyAt(at)
}

func (a readyAt) get() (at int64, requeued bool) {
	if a < 0 {
		return int64(^a), true
	}
	return int64(a), false
}

// requeue makes a job whose lease ended by expiry or release pending at
// readyAt, or dead at "at" if it has used all its attempts.
func (r *Router[T]) requeue(j *job[T], readyAt, at int64) {
	if j.attempt >= j.maxAttempts {
		r.kill(j, at)
		return
	}
	r.makeReady(j, readyAt)
}

// kill makes a job dead (StateDead).
func (r *Router[T]) kill(j *job[T], at int64) {
	if j.fails.lastError() == "" {
		j.setLastError(contract.AttemptsExhausted)
	}
	r.stats.Dead++
	r.tally(contract.TallyDead, at)
	var err error
	if r.hooked {
		err = errors.New(j.fails.lastError())
	}
	r.emit(EventDead, at, j, nil, j.token, err)
	r.finish(j, StateDead, at)
}

// makeReady makes j pending with ready time at and wakes one waiter.
func (r *Router[T]) makeReady(j *job[T], at int64) {
	r.setState(j, StatePending)
	j.at = at
	j.updated = max(j.updated, at)
	r.pushReady(j)
}

// pushReady puts pending j on the ready queue and wakes a waiter, unless
// the router is paused (Resume wakes them then).
func (r *Router[T]) pushReady(j *job[T]) {
	r.ready.Push(j)
	if !r.paused {
		r.wakeOne()
	}
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

// reachRunAt makes j, the scheduled job first due (r.sched's head), pending
// at its run-at, as if at that instant.
func (r *Router[T]) reachRunAt(j *job[T]) {
	r.sched.Pop()
	r.makeReady(j, j.at)
}

// finish moves j to a terminal state at "at" and into retention, or drops
// it at once when Retention < 0.
func (r *Router[T]) finish(j *job[T], s State, at int64) {
	r.setState(j, s)
	j.updated = max(j.updated, at)
	j.at = at
	if r.opts.Retention < 0 {
		r.drop(j, at)
		return
	}
	j.at = addSat(at, r.opts.Retention)
	r.retained.Push(j)
	r.arm(j.at)
}

// purge drops j, the retention queue's head, at j.at (its purge instant).
func (r *Router[T]) purge(j *job[T]) {
	r.retained.Pop()
	r.drop(j, j.at)
}

// drop removes j from the router at instant at (its purge, or Delete):
// from the ID index, the enqueue order and the counts, with an
// EventPurged. The caller has taken it out of its heap or the retention
// queue, if any.
func (r *Router[T]) drop(j *job[T], at int64) {
	r.jobs.Delete(j, j.hash)
	r.order.Remove(j.orderChunk, j.seq, uint8(j.state))
	r.counts[j.state]--
	r.stats.Purged++
	r.emit(EventPurged, at, j, nil, j.token, nil)
	r.forget(j)
	if r.idle != nil {
		r.noteIdle()
	}
}

// noteIdle closes r.idle, which a Client's Drained waits on, once no job
// is unfinished. The caller holds r.mu and has checked r.idle != nil.
func (r *Router[T]) noteIdle() {
	if r.unfinished() == 0 {
		close(r.idle)
		r.idle = nil
	}
}

// forget clears what a record no longer in the router carried: a stale
// Lease still points at it (to be refused), and a block of records
// (a batch's, or Enqueue's: reserve.go) lives while any of them does,
// so neither may keep it.
func (r *Router[T]) forget(j *job[T]) {
	var zero T
	j.id, j.payload, j.progress, j.fails = "", zero, nil, nil
	j.orderChunk = nil
	// j.meta stays: Lease.Metadata reads it without the lock, and only a
	// stale lease still points at j.
}

// setOrder records j's chunk of the enqueue order.
func setOrder[T any](j *job[T], c *order.Chunk[job[T]]) { j.orderChunk = c }

// endLease ends j's current lease: it leaves the lease heap, and every
// context watching it (Run's handler context, KeepAlive's) is canceled at
// once with a *LeaseLostError saying why, whoever ended it: lost (expiry,
// Cancel, Close) or ended by its holder (Complete, Fail, Release, Snooze,
// Run's hand-back; no refusal: see contract.EndedByHolder and
// Lease.keep). The caller holds r.mu and moves j to its next state at
// once.
func (r *Router[T]) endLease(j *job[T], why endReason) {
	r.leases.Remove(int(j.heapIndex))
	j.ended = why
	l := j.lease
	j.lease = nil
	if _, run := l.lost.(*leaseCtx); l.lost != nil && !(run && endedByHolder[why]) {
		// The contexts are canceled once r.mu is released, before the
		// call that ended the lease returns (tell). Run's handler
		// context is not told of its holder's end (see tell): with no
		// other watcher, no error is built (one per job Run completes).
		r.tell(l.lost, r.lostError(l))
	}
	l.lost = nil
}

// setState moves j to state s, keeping the per-state counts, and closes
// the drain channel when the last lease ends during Close.
func (r *Router[T]) setState(j *job[T], s State) {
	r.counts[j.state]--
	r.counts[s]++
	j.orderChunk.Move(uint8(j.state), uint8(s))
	if j.state == StateLeased && r.drained != nil && r.counts[StateLeased] == 0 {
		close(r.drained)
		r.drained = nil
	}
	j.state = s
	if r.idle != nil {
		r.noteIdle()
	}
}

// insert stores a new job at pos (from a Find that found nothing, with no
// change since) and makes it pending, or scheduled until its run-at. The
// record is j if not nil (zero, from a block of records: Enqueue's,
// reserve.go, or EnqueueMany's, batch.go), else a new one. The caller
// holds r.mu and has settled at now.
func (r *Router[T]) insert(id string, payload T, s *enqueueSpec, pos int, now int64, j *job[T]) {
	at := now
	if s.Delay != 0 {
		at = addSat(now, s.Delay)
	} else if !s.RunAt.IsZero() {
		at = max(now, addSat(0, s.RunAt.Sub(r.epoch)))
	}
	r.seq++
	if j == nil {
		j = new(job[T])
	}
	// Field by field: the record is zero (new, or a fresh batch's), and a
	// composite literal here would cost a copy.
	j.id, j.payload, j.priority, j.maxAttempts = id, payload, s.Priority, int32(s.MaxAttempts)
	j.hash, j.seq, j.created, j.updated, j.heapIndex, j.timeout = s.hash, r.seq, now, now, -1, s.Timeout
	j.meta, j.kind = s.Metadata, s.kind
	r.jobs.Insert(j, s.hash, pos)
	r.stats.Enqueued++
	if at <= now {
		// Ready at once, the common Enqueue: the job is born pending
		// (makeReady's work without setState's move from stateNew, whose
		// checks concern a lease ending or the last unfinished job).
		j.state, j.at = StatePending, now
		j.orderChunk = r.order.Append(j, j.seq, uint8(StatePending))
		r.counts[StatePending]++
		r.emit(EventEnqueued, now, j, nil, 0, nil)
		r.pushReady(j)
		return
	}
	j.state = stateNew
	j.orderChunk = r.order.Append(j, j.seq, uint8(stateNew))
	r.emit(EventEnqueued, now, j, nil, 0, nil)
	r.schedule(j, at, now)
}
