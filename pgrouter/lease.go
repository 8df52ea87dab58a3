package pgrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Lease is one worker's time-bounded claim on one job (see
// leaserouter.Lease), with validity decided by the database: every
// operation is one statement that acts only if the job's row has the
// lease's Token, is leased, and its lease_expires_at is after
// clock_timestamp() at the moment the statement locks the row, and that
// otherwise changes nothing and reports the job's current token and the
// reason, in the same round trip, as a *leaserouter.LeaseLostError. The
// row lock lasts until commit, so no re-claim can slip in between (which
// is what makes CompleteTx safe inside a long transaction). Leases as a
// recoverable alternative to locks: Gray and Cheriton, SOSP 1989; fencing
// tokens: Kleppmann 2016, Chubby's sequencers (Burrows, OSDI 2006).
//
// The exported fields are set at grant and never change. Methods are safe
// for concurrent use; each takes a ctx (nil means context.Background())
// and returns errors wrapping the driver's when the database cannot be
// reached.
type Lease[T any] struct {
	JobID    string
	Payload  T
	Attempt  int               // 1 for the job's first lease, 2 for its second, ...
	Token    leaserouter.Token // fencing token: pass it to Fence in the transaction that writes downstream
	WorkerID string
	Progress []byte // checkpoint left by an earlier attempt; nil if none

	r      *Router[T]
	mu     sync.Mutex
	expiry time.Time // the database's expiry instant, as of the last accepted heartbeat
	proven time.Time // on the client's monotonic clock: send time of the last accepted grant or heartbeat + LeaseDuration
	txDone bool      // CompleteTx returned nil: completed if its transaction committed
	txXid  uint64    // txDone: the full ID of the (sub)transaction that wrote the completion (see pending)
	txAt   time.Time // txDone: the database's instant of that completion
	cut    []int64   // ids of this lease's operations whose outcome is unknown and not yet resolved (see outcome.go)
	endOps []int64   // ids of the completions of this lease by leases_end.sql whose outcome is unknown (see endedBy)

	granted  time.Time         // the database's instant of the grant
	wait     time.Duration     // how long the job was ready before this lease (Event.Wait)
	requeued bool              // ready again because a lease expired (Event.Requeued)
	timeout  time.Duration     // the job's WithTimeout, 0 if none: Run's limit for this attempt (see limit)
	kind     string            // the job's kind (Job.Kind)
	arm      int               // the index of kind in the Router's Options.kinds (the claim's arm, less one)
	meta     map[string]string // the job's metadata (WithMetadata); nil if none. Never written: readers share it

	idle atomic.Bool // a Run's, not running: leased ahead, or finished (Close leaves it to the Run: see revokeHeld)

	// via is, in the lease a Client's handler gets (typed for its kind),
	// the lease of the queue's Router that it views: every method acts on
	// via, which Run's machinery holds, heartbeats and ends; nil in a
	// Router's own leases.
	via *Lease[json.RawMessage]
}

// event is an event of l at the instant at: Held is the time since the
// grant.
func (l *Lease[T]) event(kind leaserouter.EventKind, at time.Time) leaserouter.Event {
	return leaserouter.Event{Kind: kind, Time: at, JobID: l.JobID, WorkerID: l.WorkerID, Token: l.Token,
		Attempt: l.Attempt, Held: max(0, at.Sub(l.granted)), JobKind: l.kind}
}

// provenUntil is the instant, on the client's monotonic clock, until
// which the lease is known valid: LeaseDuration after the send time of
// its last accepted grant or heartbeat.
func (l *Lease[T]) provenUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proven
}

// accepted records a heartbeat sent at sent that the database accepted,
// leaving the expiry exp; a zero exp (a completion pending in the
// caller's transaction proved the lease: see Router.pending) leaves the
// expiry as it was.
func (l *Lease[T]) accepted(sent, exp time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !exp.IsZero() {
		l.expiry = exp
	}
	l.proven = sent.Add(l.r.opts.LeaseDuration)
}

// txTried reports whether CompleteTx returned nil for l (its transaction
// may still be open).
func (l *Lease[T]) txTried() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.txDone
}

// completedTx reports whether CompleteTx completed l in a transaction
// that committed (the row shows this lease's completion), reading the row
// with ctx.
func (l *Lease[T]) completedTx(ctx context.Context) bool {
	if !l.txTried() {
		return false
	}
	return l.resolved(ctx, leaserouter.LostCompleted)
}

// Expiry returns the lease's expiry instant on the database's clock, as
// of its grant or last accepted Heartbeat (it says nothing about whether
// the lease is still valid). A nil *Lease returns the zero Time.
func (l *Lease[T]) Expiry() time.Time {
	if l != nil && l.via != nil { // a Client handler's view: the queue's lease acts
		return l.via.Expiry()
	}
	if l == nil || l.r == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// Heartbeat extends the lease to the database's clock + LeaseDuration,
// never shortening it and never changing its token. A non-nil progress is
// stored as the job's checkpoint, handed to the next lease of the job if
// this one is lost; nil keeps the last one, empty clears it. It returns a
// *LeaseLostError if the lease is no longer valid, changing nothing.
func (l *Lease[T]) Heartbeat(ctx context.Context, progress []byte) error {
	if l != nil && l.via != nil { // a Client handler's view: the queue's lease acts
		return l.via.Heartbeat(ctx, progress)
	}
	ctx = orBackground(ctx)
	sent := time.Now()
	var r *Router[T]
	if l != nil {
		r = l.r
	}
	if r == nil {
		return &leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease}
	}
	res, err := l.op(ctx, r.db, false, 0, "Heartbeat", r.st.heartbeatLease, args{"queue": r.opts.Queue, "id": l.JobID,
		"token": int64(l.Token), "lease_us": r.lease, "set_progress": progress != nil, "progress": progress})
	if err != nil {
		return err
	}
	l.accepted(sent, *res.expiry)
	e := l.event(leaserouter.EventLeaseExtended, *res.at)
	e.Held = 0
	r.emit(e)
	r.mu.Lock()
	r.stats.Heartbeats++
	r.mu.Unlock()
	return nil
}

// Complete ends the lease with success: the job is StateSucceeded, kept
// for Get and dedup for Retention. It returns a *LeaseLostError if the
// lease is no longer valid, changing nothing.
//
// If the connection fails (or ctx ends) after the statement was sent, the
// outcome is resolved before Complete returns, on another connection (see
// the package doc, Faults): nil if the row shows this lease's completion,
// otherwise the error, a final answer — unless the resolution cannot
// finish within 40ms of ctx's end (the statement still waiting at the
// server, say, or the database unreachable): then the outcome is unknown,
// and a retry tells (a second Complete of a lease that completed is
// refused with reason completed).
func (l *Lease[T]) Complete(ctx context.Context) error {
	if l != nil && l.via != nil { // a Client handler's view: the queue's lease acts
		return l.via.Complete(ctx)
	}
	ctx = orBackground(ctx)
	res, err := l.end(ctx, "Complete", leaserouter.LostCompleted, nil)
	at := time.Now()
	switch {
	case err == nil:
		at = *res.at
	case errors.As(err, new(*leaserouter.LeaseLostError)) || !l.resolved(ctx, leaserouter.LostCompleted):
		return err
	}
	l.r.keepers.holderEnded(l, leaserouter.LostCompleted)
	l.r.emit(l.event(leaserouter.EventCompleted, at))
	l.r.release(l)
	return nil
}

// Fail ends the lease with a failed attempt: LastError becomes cause's
// message ("unknown error" for nil; NUL bytes and invalid UTF-8 replaced
// by U+FFFD, which a text column needs; cut to
// leaserouter.MaxErrorBytes), and a record of the attempt joins the job's
// Errors. cause's Error() is called once,
// with a panic recovered: a cause whose Error() panics (a typed nil
// pointer returned as an error is the common case) still fails the
// attempt, with a LastError saying so. A Permanent cause, or a job out of
// attempts, makes it dead (StateDead); otherwise it is scheduled again
// after Options.Backoff(attempt) (called here, before the statement), or
// pending at once if that is <= 0. It returns a *LeaseLostError if the
// lease is no longer valid, changing nothing. An unknown outcome is
// resolved as Complete's is: nil if the row shows this lease failed.
func (l *Lease[T]) Fail(ctx context.Context, cause error) error {
	if l != nil && l.via != nil { // a Client handler's view: the queue's lease acts
		return l.via.Fail(ctx, cause)
	}
	ctx = orBackground(ctx)
	if l == nil || l.r == nil {
		return &leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease}
	}
	// cause's Error, Unwrap and As are user code, read once, recovered
	// (a typed nil error fails the attempt, saying Error() panicked). The
	// text goes into a text column, which takes neither NUL nor invalid
	// UTF-8.
	text, cause, permanent := contract.FailCause(cause)
	// Cut again: a replacement may be longer than what it replaces.
	text = contract.TruncateError(strings.ToValidUTF8(strings.ReplaceAll(text, "\x00", "\uFFFD"), "\uFFFD"))
	r := l.r
	var backoff time.Duration
	if !permanent { // no Backoff for a permanent failure
		backoff = r.backoff(l.Attempt, l.JobID)
	}
	res, answered, err := l.endByHolder(ctx, "Fail", leaserouter.LostFailed,
		args{"permanent": permanent, "delay_us": backoff.Microseconds(), "error": text})
	if !answered {
		return err
	}
	defer r.release(l) // after the events
	failed := l.event(leaserouter.EventFailed, *res.at)
	failed.Err = cause
	next := l.event(leaserouter.EventRetryScheduled, *res.at)
	next.Held = 0
	r.mu.Lock()
	if isState(res.state, leaserouter.StateDead) {
		r.stats.Dead++
		next.Kind, next.Err = leaserouter.EventDead, cause
	} else {
		r.stats.Retries++
	}
	r.mu.Unlock()
	r.emit(failed, next)
	if !isState(res.state, leaserouter.StateDead) {
		r.notify(ctx) // ready, or a new due instant for the waiters' timers
	}
	return nil
}

// backoff is Options.Backoff(attempt) for job jobID, with a panic
// recovered (contract.Backoff): the attempt uses DefaultBackoff, the panic
// is counted in Stats.CallbackPanics and reported through the delivery
// goroutine to the Logger, or at once to slog.Default() when no hook is
// set.
func (r *Router[T]) backoff(attempt int, jobID string) time.Duration {
	d, panicked := contract.Backoff(r.opts.Backoff, leaserouter.DefaultBackoff, attempt)
	if panicked != nil {
		r.mu.Lock()
		r.stats.CallbackPanics++
		r.mu.Unlock()
		if !r.ev.report(panicked.Error(), jobID) {
			contract.ReportTo(slog.Default(), panicked.Error(), jobID)
		}
	}
	return d
}

// Release hands the lease back before its expiry: the job is pending
// again at once (its attempt counted; dead if that was its last). It
// returns a *LeaseLostError if the lease is no longer valid, changing
// nothing. An unknown outcome is resolved as Complete's is: nil if the
// row shows this lease released.
func (l *Lease[T]) Release(ctx context.Context) error {
	if l != nil && l.via != nil { // a Client handler's view: the queue's lease acts
		return l.via.Release(ctx)
	}
	ctx = orBackground(ctx)
	res, answered, err := l.endByHolder(ctx, "Release", leaserouter.LostReleased, nil)
	if !answered {
		return err
	}
	r := l.r
	defer r.release(l) // after the events
	r.emit(l.event(leaserouter.EventReleased, *res.at))
	if isState(res.state, leaserouter.StateDead) {
		dead := l.event(leaserouter.EventDead, *res.at)
		dead.Held, dead.Err = 0, errExhausted
		r.emit(dead)
		r.mu.Lock()
		r.stats.Dead++
		r.mu.Unlock()
	} else {
		r.notify(ctx)
	}
	return nil
}

// revokeHeld makes the jobs of leases still held pending again at once
// (a Run's not running are left to the Run: see Lease.idle), trying
// until ctx is done; they stay held until that committed (valid until
// their expiry otherwise: a Run still completes them).
func (r *Router[T]) revokeHeld(ctx context.Context) error {
	r.mu.Lock()
	ls := make([]*Lease[T], 0, len(r.held))
	for l := range r.held {
		if !l.idle.Load() { // a Run's lease not running is the Run's to hand back or complete
			ls = append(ls, l)
		}
	}
	r.mu.Unlock()
	if len(ls) == 0 {
		return nil
	}
	// Revoked as on every backend: pending again at once with the attempt
	// counted, even on its last attempt (leaserouter_end_lease); a lease
	// already expired is left to settling, which settles it as of its
	// expiry.
	revoked, err := readEnded(r.db.Query(ctx, r.st.endLeases, r.endManyArgs(ls, leaserouter.LostRevoked, false)))
	if err != nil {
		return fmt.Errorf("pgrouter: Close: revoke leases: %w", err)
	}
	var evs []leaserouter.Event
	for _, l := range ls {
		x, ok := revoked[keyOf(l)]
		if !ok {
			continue
		}
		e := l.event(leaserouter.EventReleased, x.at)
		e.Err = errRevoked
		evs = append(evs, e)
	}
	r.emit(evs...)
	r.mu.Lock()
	for _, l := range ls { // committed: revoked, or ended already
		delete(r.held, l)
	}
	r.checkDrained()
	r.mu.Unlock()
	r.notify(ctx)
	return nil
}

// completeAll completes ls on q in one statement (those still valid), as
// Run does with finished jobs outside a claim, and reports whether the
// statement ran (if not, none was completed). With skip (a heartbeat
// round's: lockForms), a lease whose row another transaction holds is
// neither completed nor refused but returned in later, still held, for
// the caller to try again.
func (r *Router[T]) completeAll(ctx context.Context, q querier, ls []*Lease[T], skip bool) (later []*Lease[T], ok bool) {
	stmt := r.st.endLeases
	if skip {
		stmt = r.st.endLeasesSkipping
	}
	a := r.endManyArgs(ls, leaserouter.LostCompleted, true)
	done, err := readEnded(q.Query(ctx, stmt, a))
	if skip && err == nil {
		// The rows read first (heldElsewhere's inspect), the records after:
		// an earlier statement that deleted a row after the read shows in
		// the records.
		later, ls = r.heldElsewhere(ctx, q, ls, leaserouter.LostCompleted, func(l *Lease[T]) bool { _, ok := done[keyOf(l)]; return ok })
	}
	if ops := endOpsOf(ls); err == nil && len(ops) > 0 {
		// A statement of its own, as of after the rows were locked: one
		// that held a row until it committed its deletion shows it.
		var at map[leaserouter.Token]time.Time
		if at, err = readEndedBy(q.Query(ctx, r.st.leasesEnded, args{"ops": ops})); err == nil {
			endedBy(ls, done, at)
		}
	}
	if err != nil {
		r.endUnknown(append(ls, later...), a)
		return nil, false
	}
	r.completedMany(ls, done)
	return later, true
}

// handBack hands back ls on q (see handBackMany), wakes the queue's
// waiters (on q), and reports whether the statement ran. On an error the
// leases stay until their expiry, unless the caller tries again (a lease
// handed back already is left alone).
func (r *Router[T]) handBack(ctx context.Context, q querier, ls []*Lease[T]) bool {
	_, err := r.handBackErr(ctx, q, ls, false)
	return err == nil
}

// handBackErr is handBack, returning the statement's error. With skip (a
// heartbeat round's: lockForms), a lease whose row another transaction
// holds is left as it is and returned in later, still held, for the
// caller to try again.
func (r *Router[T]) handBackErr(ctx context.Context, q querier, ls []*Lease[T], skip bool) (later []*Lease[T], err error) {
	if len(ls) == 0 {
		return nil, nil
	}
	stmt := r.st.handBackMany
	if skip {
		stmt = r.st.handBackManySkipping
	}
	ids, tokens := leaseKeys(ls)
	back, err := readInstants(q.Query(ctx, stmt, args{"queue": r.opts.Queue, "ids": ids, "tokens": tokens}))
	if err == nil && skip {
		later, ls = r.heldElsewhere(ctx, q, ls, "", func(l *Lease[T]) bool { _, ok := back[keyOf(l)]; return ok })
	}
	for _, l := range ls {
		if at, ok := back[keyOf(l)]; ok && r.ev != nil {
			r.emit(l.event(leaserouter.EventReleased, at))
		}
		r.release(l)
	}
	if err == nil && len(back) > 0 {
		r.notifyOn(ctx, q)
	}
	return later, err
}

// heldElsewhere splits ls after a skipping statement (lockForms), whose
// result has the leases for which in is true. later are those it left
// alone because another transaction held the row: the row, read without
// a lock, still shows the lease (leased, its token) unexpired, or, for a
// completion (reason "completed"), shows it ended so already by an
// earlier statement whose reply was lost (the next round's statement
// accepts it as done). rest are the others: in its result, or refused
// (an expired lease among them: the statement would refuse it whenever
// it got the row). It reads the rows (leases_inspect.sql), one round
// trip, only if some lease is not in the result; if that read fails,
// every such lease is later (the caller's next statement tells).
func (r *Router[T]) heldElsewhere(ctx context.Context, q querier, ls []*Lease[T], reason leaserouter.LostReason, in func(*Lease[T]) bool) (later, rest []*Lease[T]) {
	var out []*Lease[T]
	for _, l := range ls {
		if !in(l) {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return nil, ls
	}
	found, err := r.inspect(ctx, q, out)
	rest = make([]*Lease[T], 0, len(ls)-len(out))
	for _, l := range ls {
		row, ok := found[l.JobID]
		if !in(l) && (err != nil || ok && (stillHeld(l, row) && row.live || endedAlready(l, row, reason))) {
			later = append(later, l)
		} else {
			rest = append(rest, l)
		}
	}
	return later, rest
}

// stillHeld reports whether row, read without a lock, still shows l's
// lease: leased, its token (expired or not).
func stillHeld[T any](l *Lease[T], row opResult) bool {
	return row.token != nil && leaserouter.Token(*row.token) == l.Token && isState(row.was, leaserouter.StateLeased)
}

// endedAlready reports whether row, read without a lock, shows l's lease
// ended for reason (not "": a statement that accepts an end already
// done), by l's holder.
func endedAlready[T any](l *Lease[T], row opResult, reason leaserouter.LostReason) bool {
	return reason != "" && row.token != nil && leaserouter.Token(*row.token) == l.Token &&
		!isState(row.was, leaserouter.StateLeased) && row.ended != nil && *row.ended == string(reason)
}

// Metadata returns the job's metadata (leaserouter.WithMetadata), as
// the claim read it; nil if it has none. The map is shared (with the
// lease's Attempt in a Client, say): read it, never write it. It takes
// no lock (a job's metadata never changes once enqueued), works after
// the lease ends and after Close, and returns nil for a nil *Lease.
func (l *Lease[T]) Metadata() map[string]string {
	if l == nil {
		return nil
	}
	return l.meta
}
