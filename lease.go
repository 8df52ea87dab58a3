package leaserouter

import (
	"log/slog"
	"slices"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// Lease is one worker's time-bounded claim on one job: the right to act on
// the job until Expiry, proven by Token. Every operation on a lease checks
// that it is still valid — it is the job's current lease (same Token, job
// leased) and the router's clock is before its expiry — and is refused with
// a *LeaseLostError otherwise, whether or not the reaper has noticed.
//
// The exported fields are set when the lease is granted and never change; a
// holder may read them freely. Methods are safe for concurrent use. The
// Lease a Client's handler gets (Register) acts on the job in its queue,
// as a Router's does. Leases
// as a recoverable alternative to locks: Gray and Cheriton, "Leases", SOSP
// 1989.
type Lease[T any] struct {
	JobID    string
	Payload  T
	Attempt  int    // 1 for the job's first attempt, 2 for its second, ... (a lease Run hands back unstarted is no attempt: see Run)
	Token    Token  // fencing token: pass it to a Fence before writing downstream
	WorkerID string // as given to Acquire or TryAcquire
	Progress []byte // checkpoint left by an earlier attempt (a copy), so a retry can resume; nil if none

	r       *Router[T]
	j       *job[T]
	granted int64       // the instant it was granted, on the router's clock
	expiry  int64       // guarded by r.mu
	lost    lostWatcher // guarded by r.mu; told when the lease is lost against the holder's will; nil if none
}

// Expiry returns the instant the lease ends unless extended by Heartbeat
// (or by a KeepAlive's heartbeats, each counted at the instant it was
// due). It is the last expiry the lease had while valid; it says nothing
// about whether the lease is still valid (an operation on it tells). It
// blocks only on the router's lock, and works after Close (returning the
// expiry the lease had then). A nil *Lease returns the zero Time.
func (l *Lease[T]) Expiry() time.Time {
	if l == nil || l.r == nil {
		if v := l.view(); v != nil {
			return v.Expiry()
		}
		return time.Time{}
	}
	r := l.r
	r.lockSettled() // KeepAlive's heartbeats due by now count
	exp := r.timeAt(l.expiry)
	r.unlockAndDeliver()
	return exp
}

// Heartbeat extends the lease to now+LeaseDuration, proving the holder is
// alive. It never shortens the lease and never changes its token. A non-nil
// progress is copied and stored as the job's checkpoint, handed to the next
// lease of the job (Lease.Progress) if this one is lost; a nil progress keeps
// the last checkpoint, and an empty one clears it. It returns a
// *LeaseLostError if the lease is no longer valid (including after Close),
// changing nothing. It blocks only on the router's lock, never on event
// delivery, accepted or refused (see Options.OnEvent for how a refused
// lease's events stay bounded).
func (l *Lease[T]) Heartbeat(progress []byte) error {
	if l == nil || l.r == nil {
		if v := l.view(); v != nil {
			return v.Heartbeat(progress)
		}
		return errNilLease()
	}
	r := l.r
	if progress != nil {
		// Copied before the lock, so no hold of it grows with the
		// checkpoint (wasted if the heartbeat is refused).
		progress = slices.Clone(progress)
	}
	_, now, err := l.lock()
	if err != nil {
		if r.phase != phaseClosed {
			r.stats.HeartbeatsRefused++
		}
		r.unlockAndDeliver()
		return err
	}
	r.extend(l, now, progress)
	r.unlockAndDeliver()
	return nil
}

// extend is a heartbeat of l at now: l's lease lasts until
// now+LeaseDuration, unless it lasts longer already, and a non-nil
// progress becomes the job's checkpoint. The caller holds r.mu and has
// checked that l is valid at now.
func (r *Router[T]) extend(l *Lease[T], now int64, progress []byte) {
	j := l.j
	if exp := addSat(now, r.opts.LeaseDuration); exp > j.at {
		// Out and in again: the new expiry is mostly the latest yet (every
		// lease lasts LeaseDuration from an earlier instant), so it goes
		// to the back of the queue's ring.
		r.leases.Remove(int(j.heapIndex))
		j.at = exp
		r.leases.Push(j)
		r.noteDue(exp)
	}
	l.expiry = j.at
	if progress != nil {
		j.progress = progress // never written again: see row
	}
	j.updated = max(j.updated, now)
	r.stats.Heartbeats++
	r.emit(EventLeaseExtended, now, j, l, l.Token, nil)
}

// Complete marks the job succeeded and ends the lease. It returns a
// *LeaseLostError if the lease is no longer valid, changing nothing: a
// stale holder can never complete a job another worker now holds. Like
// Heartbeat, it blocks only on the router's lock, accepted or refused.
func (l *Lease[T]) Complete() error {
	if v := l.view(); v != nil {
		return v.Complete()
	}
	return l.end(func(r *Router[T], j *job[T], now int64) { r.complete(j, l, now) })
}

// end runs op, which ends l, as one critical section after l.lock, or
// refuses it as every lease operation is refused.
func (l *Lease[T]) end(op func(r *Router[T], j *job[T], now int64)) error {
	if l == nil || l.r == nil {
		return errNilLease()
	}
	r := l.r
	j, now, err := l.lock()
	if err != nil {
		r.unlockAndDeliver()
		return err
	}
	op(r, j, now)
	r.unlockAndDeliver()
	return nil
}

// Fail ends the lease with a failed attempt. The job's LastError becomes
// cause's message ("unknown error" for a nil cause). cause's Error method
// is called once, outside the router's lock, with a panic recovered: a
// cause whose Error() panics (a typed nil pointer returned as an error is
// the common case) still fails the attempt, LastError says that Error()
// panicked and with what, and events carry an error whose Error() says
// the same and whose Unwrap gives cause. If cause is (or wraps) a
// Permanent error, or the job has used all its attempts, the job becomes
// StateDead; otherwise it is scheduled again after
// Options.Backoff(attempt), or made pending at once if that is <= 0.
// Backoff is called before the lease is checked, outside the router's
// lock, even if the call is then refused. It returns a *LeaseLostError if
// the lease is no longer valid, changing nothing. Like Heartbeat, it
// blocks only on the router's lock, accepted or refused.
func (l *Lease[T]) Fail(cause error) error {
	if l == nil || l.r == nil {
		if v := l.view(); v != nil {
			return v.Fail(cause)
		}
		return errNilLease()
	}
	// cause's Error, Unwrap and As are user code: read here, recovered and
	// before taking the lock, never under it. A cause whose Error()
	// panics travels on as a *usercode.Safe saying so.
	text, cause, permanent := contract.FailCause(cause)
	r := l.r
	// Backoff is user code: called before taking the lock, never under it.
	// l.Attempt is the job's attempt count whenever l is still valid.
	var delay time.Duration
	var panicked error
	if !permanent {
		delay, panicked = r.backoff(l.Attempt)
	}
	r.lock()
	// Reported before the check, so the report comes before anything the
	// check emits (settled expiries, stale_rejected).
	if panicked != nil && (r.phase == phaseClosed || !r.reportPanic(panicked, l.JobID)) {
		// No delivery goroutine (none configured, or ended by Close, after
		// which no count changes): report it after the unlock below.
		defer contract.ReportTo(slog.Default(), panicked.Error(), l.JobID)
	}
	j, now, err := l.check()
	if err != nil {
		r.unlockAndDeliver()
		return err
	}
	r.fail(j, l, now, text, cause, permanent, delay)
	r.unlockAndDeliver()
	return nil
}

// backoff returns Options.Backoff(attempt), or DefaultBackoff(attempt) and
// the recovered panic as an error if Backoff panics.
func (r *Router[T]) backoff(attempt int) (d time.Duration, panicked error) {
	return contract.Backoff(r.opts.Backoff, DefaultBackoff, attempt) // the same on every backend
}

// Release hands the lease back now instead of letting it expire. The
// attempt still counts: the job becomes pending at once, or dead
// (StateDead) if it has used all its attempts. It returns a *LeaseLostError if
// the lease is no longer valid, changing nothing. Like Heartbeat, it
// blocks only on the router's lock, accepted or refused.
func (l *Lease[T]) Release() error {
	if v := l.view(); v != nil {
		return v.Release()
	}
	return l.end(func(r *Router[T], j *job[T], now int64) { r.release(j, l, now) })
}

// lock begins an operation on l: it takes r.mu, settles what is due at
// the current instant and checks that l is still valid (holding), the
// "no hidden timing" rule said once for every lease operation. It returns
// l's job and the instant with r.mu held; on a refusal, with r.mu still
// held, the *LeaseLostError (counted and reported as holding does).
func (l *Lease[T]) lock() (j *job[T], now int64, err error) {
	l.r.lock()
	return l.check()
}

// check is lock's second half, for a caller that already holds r.mu
// (which settleNow may release and take again while a mass expiry is
// settled a batch at a time).
func (l *Lease[T]) check() (j *job[T], now int64, err error) {
	now = l.r.settleNow()
	j, err = l.r.holding(l, now)
	return j, now, err
}

// valid reports whether l is its job's current lease and the job leased:
// the one invariant, with what is due settled by the caller (holding
// settles; so must any other caller). The caller holds r.mu.
//
// l.j.lease == l is the token check: the lease of a job is replaced, never
// reused, on every grant, so pointer identity is token identity.
func (r *Router[T]) valid(l *Lease[T]) bool { return l.j.state == StateLeased && l.j.lease == l }

// holding returns l's job if l is still valid. Otherwise it counts and
// reports the refusal and returns a *LeaseLostError. The caller holds r.mu
// and has settled what is due at now (settleNow).
func (r *Router[T]) holding(l *Lease[T], now int64) (*job[T], error) {
	if r.valid(l) {
		return l.j, nil
	}
	err := r.lostError(l)
	if r.phase == phaseClosed {
		return nil, err // after Close nothing changes, not even the counts
	}
	r.stats.StaleRejections++
	r.tally(contract.TallyStale, now)
	if !r.hooked || (l.lost == refused{} && r.backlogFull()) {
		// Coalesced: with the backlog full, a lease refused before adds
		// no event (its stale_rejected already said it), so a stale
		// holder retrying in a loop cannot grow the backlog, and no
		// refusal ever waits for delivery (a worker's stale lease must
		// not hold up its healthy ones).
		return nil, err
	}
	l.lost = refused{}
	e := r.record(EventStaleRejected, now, l.j, l, l.Token, err)
	e.attempt = int32(l.Attempt) // the refused lease's, not the job's latest
	e.jobID = l.JobID            // the job may be purged: its record has no ID then
	return nil, err
}

// refused is the lostWatcher of a lease that has been refused and made a
// stale_rejected event: a lease refused once is never valid again, so
// nothing else is ever told through its watcher, and the field records,
// at no cost in size, that a further refusal may coalesce into that event.
type refused struct{}

func (refused) leaseLost(error) {}

func (r *Router[T]) lostError(l *Lease[T]) *LeaseLostError {
	e := &LeaseLostError{JobID: l.JobID, Token: l.Token, Reason: l.j.ended.reason()}
	if l.j.token != l.Token {
		e.Reason = LostSuperseded
	}
	if cur := r.jobs.Get(l.JobID); cur != nil {
		e.Current = cur.token
		// Retry replaces a finished job's record (same enqueue order,
		// seq): a lease of the record before is superseded by the new
		// record's leases.
		if cur.seq == l.j.seq && cur.token != l.Token {
			e.Reason = LostSuperseded
		}
	}
	return e
}

// lostWatcher is told, once, when a lease ends, with a *LeaseLostError
// saying why: lost against its holder's will (expiry, Cancel, Close) or
// ended by its holder (Complete, Fail, Release, Snooze). The watchers are
// Run's handler context and KeepAlive's. Router.tell queues the call
// under r.mu and unlockAndDeliver makes it once r.mu is released, before
// the call that ended the lease returns: canceling a context derived from
// the caller's ctx runs that ctx's Done and Value, the caller's code.
type lostWatcher interface{ leaseLost(cause error) }

// lostWatchers is the watcher of a lease watched more than once (Run's
// handler context and a KeepAlive, say); Router.tell tells each, in order.
type lostWatchers []lostWatcher

func (ws lostWatchers) leaseLost(cause error) {
	for _, w := range ws {
		w.leaseLost(cause)
	}
}

// unwatch takes keeper k, whose context is done, off l's watchers, so a
// lease kept by one KeepAlive after another (each canceled in turn) does
// not gather them until it ends. The caller holds r.mu.
func (l *Lease[T]) unwatch(k *keeper[T]) {
	switch cur := l.lost.(type) {
	case *keeper[T]:
		if cur == k {
			l.lost = nil
		}
	case lostWatchers:
		if i := slices.Index(cur, lostWatcher(k)); i >= 0 {
			switch cur = slices.Delete(cur, i, i+1); len(cur) {
			case 0:
				l.lost = nil
			case 1:
				l.lost = cur[0]
			default:
				l.lost = cur
			}
		}
	}
}

// lostNote is a lostWatcher's call, queued under r.mu (Router.lostNotes).
type lostNote struct {
	w     lostWatcher
	cause *LeaseLostError
}

// tell tells w, and each watcher in it, that its lease ended with cause:
// a keeper notes it at once (noteLost) and every watcher's context is
// canceled once r.mu is released (unlockAndDeliver). Run's handler context
// is not told of its holder's own end: Run ends the lease once the
// handler has returned, its context stopped already, and a handler that
// ends its own lease (which Run forbids) finds Run's end refused as a
// stale lease, whether or not a KeepAlive watches the lease too. The
// caller holds r.mu.
func (r *Router[T]) tell(w lostWatcher, cause *LeaseLostError) {
	holder := contract.EndedByHolder(string(cause.Reason))
	switch w := w.(type) {
	case lostWatchers:
		for _, x := range w {
			r.tell(x, cause)
		}
		return
	case *keeper[T]:
		w.noteLost(holder)
	case *leaseCtx:
		if holder {
			return
		}
	case refused:
		return
	}
	r.lostNotes = append(r.lostNotes, lostNote{w, cause})
}

// watch registers keeper k to be told, with a cause wrapping ErrLeaseLost,
// when l ends (see lostWatcher), and unless k's context is done puts its
// heartbeats on the router's schedule, returning how long until the first
// is due (else k's interval). If l is not valid now, k is told at once.
// ok reports whether k was registered.
func (l *Lease[T]) watch(k *keeper[T]) (first time.Duration, ok bool) {
	var w lostWatcher = k
	r := l.r
	r.mu.Lock()
	now := r.settleNow()
	first = k.interval
	ok = l.j.state == StateLeased && l.j.lease == l
	// k.ctx is the package's own context (Err runs no caller's code),
	// read under r.mu: done now, it is not scheduled; done later, unkeep
	// takes r.mu after this and unschedules it.
	if ok && k.ctx.Err() == nil && r.phase != phaseClosed {
		first = r.scheduleKept(k, now)
	}
	if ok {
		// Run's handler context is told last, so a handler woken by the
		// loss finds every other watcher's context canceled already.
		switch cur := l.lost.(type) {
		case nil:
			l.lost = w
		case *leaseCtx:
			l.lost = lostWatchers{w, cur}
		case lostWatchers:
			if _, run := cur[len(cur)-1].(*leaseCtx); run {
				l.lost = slices.Insert(cur, len(cur)-1, w)
			} else {
				l.lost = append(cur, w)
			}
		default:
			l.lost = lostWatchers{cur, w}
		}
	} else {
		r.tell(w, r.lostError(l))
	}
	r.unlockAndDeliver()
	return first, ok
}

// Permanent marks err as not worth retrying: Lease.Fail(Permanent(err)) makes
// the job StateDead at once, whatever attempts it has left. The
// result's message is err's, and errors.Is/As see err through it.
// Permanent(nil) is nil.
func Permanent(err error) error { return contract.Permanent(err) }

// IsPermanent reports whether err is, or wraps, an error made by
// Permanent: the test Fail applies on every backend, for code around a
// handler (a middleware seeing its error) that must tell a permanent
// failure from one to retry. A nil err is not permanent, nor is one whose
// Unwrap or As method panics on the way (the panic is recovered). Safe
// for concurrent use.
func IsPermanent(err error) bool { return contract.IsPermanent(err) }

// Metadata returns the job's metadata (WithMetadata), nil if it has none.
// The map is shared with the router's record of the job and its other
// leases: read it, never write it. It takes no lock (a job's metadata
// never changes once enqueued), works after the lease ends and after
// Close, and returns nil for a nil *Lease.
func (l *Lease[T]) Metadata() map[string]string {
	if l == nil || l.j == nil {
		if v := l.view(); v != nil {
			return v.Metadata()
		}
		return nil
	}
	return l.j.meta
}

// A Client runs a kind's handler on a *Lease[T] that is a view of the
// untyped lease its queue granted (a *Lease[any]): its exported fields
// are the lease's, with the payload as a T, its r and j are nil, and its
// lost field holds a viewOf that every method forwards to. The field
// costs a view no size (Lease stays 128 bytes for small T), and the
// forwarding costs a granted lease nothing, since it is tried only where
// r is nil. A view's lost is set when it is made and never written again.

// viewOf is the lostWatcher field of a view: the lease it shows. (A
// struct of one pointer is stored in an interface without an
// allocation.)
type viewOf struct{ l *Lease[any] }

func (viewOf) leaseLost(error) {}

// view returns the lease l is a view of, or nil if l is not a view.
func (l *Lease[T]) view() *Lease[any] {
	if l == nil || l.r != nil {
		return nil
	}
	v, _ := l.lost.(viewOf)
	return v.l
}
