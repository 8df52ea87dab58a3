package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/usercode"
)

// Lease is one worker's time-bounded claim on one job, as in the core
// (leaserouter.Lease), with validity decided by the database: every
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

	granted  time.Time     // the database's instant of the grant
	wait     time.Duration // how long the job was ready before this lease (Event.Wait)
	requeued bool          // ready again because a lease expired (Event.Requeued)

	idle atomic.Bool // a Run's, not running: leased ahead, or finished (Close leaves it to the Run: see revokeHeld)
}

// event is an event of l at the instant at: Held is the time since the
// grant.
func (l *Lease[T]) event(kind leaserouter.EventKind, at time.Time) leaserouter.Event {
	return leaserouter.Event{Kind: kind, Time: at, JobID: l.JobID, WorkerID: l.WorkerID, Token: l.Token,
		Attempt: l.Attempt, Held: max(0, at.Sub(l.granted))}
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
	if l == nil || l.r == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// lockRow locks a job's row (if it exists) until the end of the
// transaction, before leaseOp runs in the same one: so leaseOp's clock
// reading, its WHERE and its report all come after the lock is held,
// even when another transaction held the row without changing it (a
// SELECT ... FOR UPDATE), which would let a lone UPDATE go on with the
// clock it read before waiting.
const lockRow = `SELECT FROM leaserouter_jobs WHERE queue = $1 AND id = $2 FOR UPDATE`

// leaseOp is the one invariant's statement, run with the row locked: the
// UPDATE (its SET list spliced in, its own arguments from $4) acts only on
// a valid lease; the outer SELECT reports, in the same round trip,
// whether it acted, the state and expiry it left, and otherwise the row
// as it was (its latest version: the lock is held): current token, state,
// why its last lease ended.
const leaseOp = `
WITH upd AS (
	UPDATE leaserouter_jobs SET %s
	WHERE queue = $1 AND id = $2 AND %s
	RETURNING state, lease_expires_at, updated_at)
SELECT (SELECT count(*) FROM upd) = 1, (SELECT state FROM upd), (SELECT lease_expires_at FROM upd), (SELECT updated_at FROM upd),
	j.token, j.state, j.ended
FROM (SELECT) one LEFT JOIN leaserouter_jobs j ON j.queue = $1 AND j.id = $2`

// validLease is the one invariant, as leaseOp's WHERE states it for the
// lease whose token is $3 (with the row locked: see lockRow).
const validLease = `token = $3 AND state = 2 AND lease_expires_at > clock_timestamp()`

// opResult is what leaseOp reports.
type opResult struct {
	ok     bool
	state  *int16     // the state the update left
	expiry *time.Time // the expiry the update left
	at     *time.Time // the instant of the update
	token  *int64     // refused: the job's current token; nil if the row is gone
	was    *int16     // refused: its state
	ended  *string    // refused: why its latest lease ended
	xid    uint64     // in a caller's transaction, done: the full ID of the (sub)transaction that wrote it
}

// op runs lockRow and leaseOp with set on q, in one round trip and one
// transaction (q's own, or the batch's implicit one). A refusal returns a
// *LeaseLostError, reported and no longer held; a caller whose operation
// ended the lease reports it, then releases it (r.release).
//
// A non-zero id makes the operation resolvable (see outcome.go): the
// transaction first takes the advisory lock on id, and acts only if id
// is not marked abandoned; if its outcome is unknown, id is kept on l
// for the resolution.
//
// inTx: q is the caller's transaction (nothing else may run on the pool
// meanwhile: the caller may hold its last connection). The check runs
// under a savepoint: rolled back to on a refusal or an error (a second
// round trip), so the row lock it took is let go at once (a stale
// caller's open transaction never blocks the valid holder) and the
// transaction stays usable; left in place on success (see CompleteTx),
// with res.xid the (sub)transaction that wrote the change.
func (l *Lease[T]) op(ctx context.Context, q querier, inTx bool, id int64, call, set string, args ...any) (opResult, error) {
	var res opResult
	if l == nil || l.r == nil {
		return res, &leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease}
	}
	r := l.r
	b := &pgx.Batch{}
	if inTx {
		b.Queue("SAVEPOINT " + savepoint)
	}
	where := validLease
	args = append([]any{r.opts.Queue, l.JobID, int64(l.Token)}, args...)
	if id != 0 {
		b.Queue(opLock, id)
		args = append(args, id)
		where += fmt.Sprintf(notAbandoned, len(args))
	}
	l.queueLock(b, inTx)
	b.Queue(fmt.Sprintf(leaseOp, set, where), args...)
	var top string
	var sub int64
	if inTx {
		b.Queue(writerOf, r.opts.Queue, l.JobID)
	}
	br := q.SendBatch(ctx, b)
	var err error
	if inTx {
		_, err = br.Exec()
	}
	if err == nil && id != 0 {
		_, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&res.ok, &res.state, &res.expiry, &res.at, &res.token, &res.was, &res.ended)
	}
	if err == nil && inTx && res.ok { // refused: the row may be gone, and writerOf has nothing to say
		err = br.QueryRow().Scan(&top, &sub)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if inTx {
		err = l.endSavepoint(ctx, q, &res, err, top, sub)
	}
	if err != nil {
		if id != 0 && unknownOutcome(err) {
			l.unsure(id)
		}
		return res, fmt.Errorf("pgrouter: %s: %w", call, err)
	}
	if res.ok {
		return res, nil // the caller reports, then releases a lease it ended
	}
	r.mu.Lock()
	r.stats.StaleRejections++
	if call == "Heartbeat" {
		r.stats.HeartbeatsRefused++
	}
	r.mu.Unlock()
	e := l.lost(res)
	stale := l.event(leaserouter.EventStaleRejected, time.Now())
	stale.Held, stale.Err = 0, e
	r.ev.add(stale) // before the release: Close delivers every event of a lease it waited for
	r.release(l)    // refused: the lease is lost, nothing left to hold
	if e.Reason == leaserouter.LostExpired && !inTx {
		r.settle(ctx) // found expired: settle it now, as the core's refusal does
	}
	return res, e
}

// lost builds the refusal's error from the row as the refusing statement
// found it, with its lock held.
func (l *Lease[T]) lost(res opResult) *leaserouter.LeaseLostError {
	e := &leaserouter.LeaseLostError{JobID: l.JobID, Token: l.Token, Reason: "unknown"}
	switch {
	case res.token == nil: // the job's row is gone (purged)
	case leaserouter.Token(*res.token) != l.Token:
		e.Current, e.Reason = leaserouter.Token(*res.token), leaserouter.LostSuperseded
	case *res.was == int16(leaserouter.StateLeased):
		// Still leased with this token, yet refused: its expiry had
		// passed at the moment the row was locked.
		e.Current, e.Reason = l.Token, leaserouter.LostExpired
	default:
		e.Current = l.Token
		if *res.ended != "" {
			e.Reason = leaserouter.LostReason(*res.ended)
		}
	}
	return e
}

// release forgets l in the Router's held leases (Close waits for them).
func (r *Router[T]) release(l *Lease[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.held[l]; !ok {
		return
	}
	delete(r.held, l)
	r.checkDrained()
}

// holds reports whether l is a lease of this Router's not yet ended.
func (r *Router[T]) holds(l *Lease[T]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.held[l]
	return ok
}

// releaseJob forgets this Router's lease of job id with token t, if held.
func (r *Router[T]) releaseJob(id string, t leaserouter.Token) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for l := range r.held {
		if l.JobID == id && l.Token == t {
			delete(r.held, l)
			r.checkDrained()
			return
		}
	}
}

// checkDrained closes drained, once, when Close has begun and no lease is
// held. The caller holds r.mu.
func (r *Router[T]) checkDrained() {
	if r.drained != nil && len(r.held) == 0 && !r.drainedDone {
		r.drainedDone = true
		close(r.drained)
	}
}

// Heartbeat extends the lease to the database's clock + LeaseDuration,
// never shortening it and never changing its token. A non-nil progress is
// stored as the job's checkpoint, handed to the next lease of the job if
// this one is lost; nil keeps the last one, empty clears it. It returns a
// *LeaseLostError if the lease is no longer valid, changing nothing.
func (l *Lease[T]) Heartbeat(ctx context.Context, progress []byte) error {
	ctx = orBackground(ctx)
	sent := time.Now()
	var r *Router[T]
	if l != nil {
		r = l.r
	}
	var dur int64
	var q querier // nil for a nil or zero Lease: op refuses those first
	if r != nil {
		dur, q = r.lease, r.db
	}
	res, err := l.op(ctx, q, false, 0, "Heartbeat", `
		lease_expires_at = greatest(lease_expires_at, clock_timestamp() + $4 * interval '1 microsecond'),
		progress = CASE WHEN $5 THEN $6::bytea ELSE progress END, updated_at = clock_timestamp()`,
		dur, progress != nil, progress)
	if err != nil {
		return err
	}
	l.accepted(sent, *res.expiry)
	e := l.event(leaserouter.EventLeaseExtended, *res.at)
	e.Held = 0
	r.ev.add(e)
	r.mu.Lock()
	r.stats.Heartbeats++
	r.mu.Unlock()
	return nil
}

// completeSet ends a lease with success; its purge time is Retention
// later ($4 microseconds).
const completeSet = `state = 3, ended = 'completed', owner = '', lease_expires_at = NULL, requeued = false,
	updated_at = clock_timestamp(), purge_at = clock_timestamp() + $4 * interval '1 microsecond'`

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
	ctx = orBackground(ctx)
	res, err := l.end(ctx, "Complete", completeSet, l.keep())
	at := time.Now()
	switch {
	case err == nil:
		at = *res.at
	case errors.As(err, new(*leaserouter.LeaseLostError)) || !l.resolved(ctx, leaserouter.LostCompleted):
		return err
	}
	l.r.ev.add(l.event(leaserouter.EventCompleted, at))
	l.r.release(l)
	return nil
}

// keep is the Retention in microseconds, 0 for a nil or zero Lease.
func (l *Lease[T]) keep() int64 {
	if l == nil || l.r == nil {
		return 0
	}
	return l.r.keep
}

// Fail ends the lease with a failed attempt: LastError becomes cause's
// message ("unknown error" for nil; NUL bytes and invalid UTF-8 replaced
// by U+FFFD, which a text column needs). cause's Error() is called once,
// with a panic recovered: a cause whose Error() panics (a typed nil
// pointer returned as an error is the common case) still fails the
// attempt, with a LastError saying so, as in the core. A Permanent cause, or a job out of
// attempts, makes it dead (StateFailed); otherwise it is scheduled again
// after Options.Backoff(attempt) (called here, before the statement), or
// pending at once if that is <= 0. It returns a *LeaseLostError if the
// lease is no longer valid, changing nothing. An unknown outcome is
// resolved as Complete's is: nil if the row shows this lease failed.
func (l *Lease[T]) Fail(ctx context.Context, cause error) error {
	ctx = orBackground(ctx)
	if l == nil || l.r == nil {
		return &leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease}
	}
	if cause == nil {
		cause = errors.New("unknown error")
	}
	// cause's Error, Unwrap and As are user code: recovered, as in the
	// core (a typed nil error fails the attempt, saying Error() panicked).
	// The text goes into a text column, which takes neither NUL nor
	// invalid UTF-8.
	text, cause := usercode.Error(cause)
	text = strings.ToValidUTF8(strings.ReplaceAll(text, "\x00", "\uFFFD"), "\uFFFD")
	r := l.r
	var backoff time.Duration
	if !leaserouter.IsPermanent(cause) { // as in the core: no Backoff for a permanent failure
		backoff = r.backoff(l.Attempt, l.JobID)
	}
	res, err := l.end(ctx, "Fail", `
		state = CASE WHEN $4 OR attempt >= max_attempts THEN 4 WHEN $5::bigint > 0 THEN 1 ELSE 0 END,
		ready_at = CASE WHEN $4 OR attempt >= max_attempts THEN ready_at
			ELSE clock_timestamp() + greatest($5::bigint, 0) * interval '1 microsecond' END,
		ended = 'failed', last_error = $6, owner = '', lease_expires_at = NULL, requeued = false,
		updated_at = clock_timestamp(),
		purge_at = CASE WHEN $4 OR attempt >= max_attempts THEN clock_timestamp() + $7 * interval '1 microsecond' END`,
		leaserouter.IsPermanent(cause), backoff.Microseconds(), text, r.keep)
	if err != nil {
		if !errors.As(err, new(*leaserouter.LeaseLostError)) && l.resolved(ctx, leaserouter.LostFailed) {
			r.release(l) // failed, as the row shows; its events are unknown here
			return nil
		}
		return err
	}
	defer r.release(l) // after the events
	failed := l.event(leaserouter.EventFailed, *res.at)
	failed.Err = cause
	next := l.event(leaserouter.EventRetryScheduled, *res.at)
	next.Held = 0
	r.mu.Lock()
	if leaserouter.State(*res.state) == leaserouter.StateFailed {
		r.stats.Dead++
		next.Kind, next.Err = leaserouter.EventDead, cause
	} else {
		r.stats.Retries++
	}
	r.mu.Unlock()
	r.ev.add(failed, next)
	if leaserouter.State(*res.state) != leaserouter.StateFailed {
		r.notify(ctx) // ready, or a new due instant for the waiters' timers
	}
	return nil
}

// errExhausted is the Err of EventDead for a job whose last lease was
// released (or revoked).
var errExhausted = errors.New("attempts exhausted")

// backoff is Options.Backoff(attempt) for job jobID, with a panic
// recovered as the core does: the attempt uses DefaultBackoff, the panic
// is counted in Stats.CallbackPanics and reported (the same report as
// the core's, through the delivery goroutine to the Logger, or at once to
// slog.Default() when no hook is set).
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
	ctx = orBackground(ctx)
	res, err := l.end(ctx, "Release", `
		state = CASE WHEN attempt >= max_attempts THEN 4 ELSE 0 END,
		ready_at = clock_timestamp(), ended = 'released', owner = '', lease_expires_at = NULL, requeued = false,
		updated_at = clock_timestamp(),
		last_error = CASE WHEN attempt >= max_attempts AND last_error = '' THEN 'attempts exhausted' ELSE last_error END,
		purge_at = CASE WHEN attempt >= max_attempts THEN clock_timestamp() + $4 * interval '1 microsecond' END`,
		l.keep())
	if err != nil {
		if !errors.As(err, new(*leaserouter.LeaseLostError)) && l.resolved(ctx, leaserouter.LostReleased) {
			l.r.release(l) // released, as the row shows; its events are unknown here
			return nil
		}
		return err
	}
	r := l.r
	defer r.release(l) // after the events
	r.ev.add(l.event(leaserouter.EventReleased, *res.at))
	if leaserouter.State(*res.state) == leaserouter.StateFailed {
		dead := l.event(leaserouter.EventDead, *res.at)
		dead.Held, dead.Err = 0, errExhausted
		r.ev.add(dead)
		r.mu.Lock()
		r.stats.Dead++
		r.mu.Unlock()
	} else {
		r.notify(ctx)
	}
	return nil
}
