package pgrouter

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leaserouter/leaserouter"
)

// Unknown outcomes. A statement whose reply never arrived (the connection
// failed, or the call's ctx ended, after it was sent) may or may not have
// committed. Lease operations resolve theirs before reporting (see
// outcome.go: an operation id, locked and marked as a claim id is). A
// claim carries a random claim id, written on the rows it leases and
// locked (an advisory lock on the id) for its transaction; a claim whose
// outcome is unknown is resolved in the background: the resolver waits
// for the claim's transaction if it is running (the advisory lock), marks
// the claim abandoned (so a claim still to reach the server claims
// nothing), and hands back every lease the claim granted, the attempt not
// counted: no worker received them (undoing the expiry settlement of
// those settled meanwhile: see undoClaimExpiry).

// claimLock takes the claim's advisory lock ($1, the claim id) for the
// transaction: a resolver of the claim waits for it. First in the claim's
// batch, so that the claim's statements read the abandoned marks after
// the lock is held.
const claimLock = `SELECT pg_advisory_xact_lock($1)`

// abandonClaim marks claim $1 abandoned (resolved by its client): a claim
// statement with this id claims nothing from then on.
const abandonClaim = `INSERT INTO leaserouter_abandoned_claims (id) VALUES ($1) ON CONFLICT DO NOTHING`

// handBackClaim ends the leases claim $2 granted on queue $1 that are
// still leased (valid or past their expiry but not settled): pending
// again in their old place with the attempt not counted, as
// handBackMany does, and the claim id cleared (the rows no longer show
// a lease of the claim: a retry of the resolver finds nothing). It
// returns how many.
const handBackClaim = `
WITH l AS (
	SELECT queue, id FROM leaserouter_jobs
	WHERE queue = $1 AND state = 2 AND claim = $2 ORDER BY id FOR UPDATE),
b AS (
	UPDATE leaserouter_jobs j SET state = 0, attempt = j.attempt - 1, owner = '', lease_expires_at = NULL,
		ended = CASE WHEN j.requeued THEN 'expired' ELSE 'released' END, updated_at = clock_timestamp(), claim = NULL
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND j.state = 2 AND j.claim = $2
	RETURNING 1)
SELECT count(*) FROM b`

// undoClaimExpiry undoes the expiry settlement of the leases claim $2
// granted on queue $1 whose expiry was settled before the resolver ran
// (the claimer could not reach the database for a LeaseDuration; another
// process settled them): nobody received them, so they are no attempt.
// It matches only rows that show nothing happened since: still the
// claim's (each grant writes its own claim id, so no later lease was
// granted, and the claim's token is still the row's), pending or dead
// with ended 'expired' (not canceled, not re-enqueued, which resets
// ended). It makes them pending with the attempt not counted (a job
// that died of the expiry lives again: purge_at cleared), ready since
// the claim's grant (the expiry instant the settlement left in ready_at,
// less the claim's lease of $3 microseconds: no heartbeat can have
// extended a lease nobody received). What the settlement overwrote is
// restored where it can be known: for a job with no earlier attempt,
// last_error empty and requeued false, as before the claim; for a later
// attempt the settlement's marks stay (last_error 'lease expired',
// requeued): the earlier attempt's error is gone. The claim id is
// cleared, as handBackClaim does. It returns how many.
const undoClaimExpiry = `
WITH l AS (
	SELECT queue, id FROM leaserouter_jobs
	WHERE queue = $1 AND claim = $2 AND state IN (0, 4) AND ended = 'expired' AND attempt > 0
	ORDER BY id FOR UPDATE),
u AS (
	UPDATE leaserouter_jobs j SET state = 0, attempt = j.attempt - 1, requeued = j.attempt > 1,
		ended = CASE WHEN j.attempt > 1 THEN 'expired' ELSE 'released' END,
		last_error = CASE WHEN j.attempt > 1 THEN j.last_error ELSE '' END,
		ready_at = j.ready_at - $3 * interval '1 microsecond', purge_at = NULL, claim = NULL,
		updated_at = clock_timestamp()
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND j.claim = $2 AND j.state IN (0, 4) AND j.ended = 'expired'
		AND j.attempt > 0
	RETURNING 1)
SELECT count(*) FROM u`

// abandonedKeep is how long abandoned claim marks are kept: longer than
// any claim can be held in the network or a stalled server.
const abandonedKeep = 24 * time.Hour

// purgeAbandoned deletes abandoned claim marks older than $1
// microseconds.
const purgeAbandoned = `DELETE FROM leaserouter_abandoned_claims WHERE at < clock_timestamp() - $1 * interval '1 microsecond'`

// newClaimID is a random claim id (never 0), also used as a lease
// operation's id (see outcome.go).
func newClaimID() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := int64(binary.LittleEndian.Uint64(b[:])); id != 0 {
			return id
		}
	}
}

// unknownOutcome reports whether a round trip that failed with err may
// have committed: the request may have reached the server, and the
// server did not report an error (which rolls the implicit transaction
// back).
func unknownOutcome(err error) bool {
	if err == nil || pgconn.SafeToRetry(err) {
		return false
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}

// resolveClaim resolves, in the background, claim id whose outcome is
// unknown: see the comment at the top of this file.
func (r *Router[T]) resolveClaim(id int64) {
	r.later(func(ctx context.Context) error { return r.resolveClaimOnce(ctx, id) })
}

// resolveClaimOnce resolves claim id in one round trip (one transaction:
// a retry after an error is harmless), waiting for the claim's
// transaction if it is running.
func (r *Router[T]) resolveClaimOnce(ctx context.Context, id int64) error {
	b := &pgx.Batch{}
	b.Queue(claimLock, id)
	b.Queue(abandonClaim, id)
	b.Queue(handBackClaim, r.opts.Queue, id)
	b.Queue(undoClaimExpiry, r.opts.Queue, id, r.lease)
	res := r.db.SendBatch(ctx, b)
	_, err := res.Exec()
	if err == nil {
		_, err = res.Exec()
	}
	var n, m int64
	if err == nil {
		err = res.QueryRow().Scan(&n)
	}
	if err == nil {
		err = res.QueryRow().Scan(&m)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n+m > 0 {
		r.notify(ctx)
	}
	return nil
}

// completeLater completes ls in the background (none if ls is empty).
func (r *Router[T]) completeLater(ls []*Lease[T]) {
	if len(ls) == 0 {
		return
	}
	r.later(func(ctx context.Context) error {
		if !r.completeAll(ctx, r.db, ls) {
			return errNotDone
		}
		return nil
	})
}

// handBackLater hands ls back in the background (see handBack).
func (r *Router[T]) handBackLater(ls []*Lease[T]) {
	r.later(func(ctx context.Context) error { return r.handBackErr(ctx, r.db, ls) })
}

// endOrLater ends l with end (Release or Fail) on ctx; if the database
// could not be asked, or did not answer, it is done in the background,
// unless the row shows it done already (ended for reason) or the lease
// ended otherwise meanwhile.
func (r *Router[T]) endOrLater(ctx context.Context, l *Lease[T], reason leaserouter.LostReason, end func(context.Context) error) {
	ended := func(err error) bool { return err == nil || errors.As(err, new(*leaserouter.LeaseLostError)) }
	if ended(end(ctx)) {
		return
	}
	r.later(func(ctx context.Context) error {
		if !r.holds(l) {
			return nil
		}
		if l.resolved(ctx, reason) { // the first try got through
			r.release(l)
			return nil
		}
		if err := end(ctx); !ended(err) {
			return err
		}
		return nil
	})
}

// errNotDone makes a background task try again.
var errNotDone = errors.New("pgrouter: not done")

// tasks runs a Router's background work (resolving unknown outcomes,
// finishing what a stopping Run could not): each task is retried, with
// backoff, until it succeeds or Close ends it.
type tasks struct {
	ctx    context.Context // ended by Close
	cancel context.CancelFunc

	mu     sync.Mutex
	n      int           // tasks running
	idle   chan struct{} // closed when n falls to 0; nil when nobody waits
	closed bool          // no task starts any more
}

func newTasks() *tasks {
	ctx, cancel := context.WithCancel(context.Background())
	return &tasks{ctx: ctx, cancel: cancel}
}

// later runs f in the background until it returns nil, waiting 50ms
// doubling to 1s between tries, each try bounded by a LeaseDuration.
// f's ctx is a grace itself (see graced): its round trips get no grace
// after it ends, so Close's end of the tasks takes effect at once.
// After Close it does nothing.
func (r *Router[T]) later(f func(ctx context.Context) error) {
	t := r.tasks
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.n++
	t.mu.Unlock()
	go func() {
		defer t.done()
		backoff := 50 * time.Millisecond
		for t.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(t.ctx, r.opts.LeaseDuration)
			err := f(graced(ctx))
			cancel()
			if err == nil {
				return
			}
			select {
			case <-t.ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		}
	}()
}

func (t *tasks) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// idleCh returns a channel closed once no task runs (nil if none runs
// now); closing also stops new tasks from starting.
func (t *tasks) idleCh(closing bool) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = t.closed || closing
	if t.n == 0 {
		return nil
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	return t.idle
}

// wait waits until no task runs, or until ctx is done (then it returns
// ctx.Err()).
func (t *tasks) wait(ctx context.Context) error {
	idle := t.idleCh(false)
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close waits until every task has ended, or until ctx is done (then it
// ends them, waits for them to return, which they do at once, and
// returns ctx.Err()). No task starts after.
func (t *tasks) close(ctx context.Context) error {
	defer t.cancel()
	idle := t.idleCh(true)
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	t.cancel()
	if idle = t.idleCh(true); idle != nil {
		<-idle
	}
	return ctx.Err()
}

// withGrace returns a context that is not done when ctx is, but grace
// later (grace from now if ctx is done already): for a last round trip
// whose answer is worth a short wait after the caller's ctx ended.
func withGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Value(graceKey{}) != nil {
		grace = 0
	}
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return g, func() { stop(); cancel() }
}

// graceKey marks a ctx that is itself a grace (a stopping Run's): a last
// round trip on it gets no more after it ends.
type graceKey struct{}

// graced marks ctx as a grace: withGrace adds nothing to it.
func graced(ctx context.Context) context.Context { return context.WithValue(ctx, graceKey{}, true) }

// lastGrace is how long a last round trip may go on after its caller's
// ctx ended (the read that resolves a lease operation's unknown outcome);
// closeGrace, Close's revocation and background work (one deadline for
// both); runGrace, a stopping Run's last round trips after its last
// handler returned (reads resolving their outcomes included: see
// graced). Each keeps its call within 100ms of its ctx's end.
const (
	lastGrace  = 40 * time.Millisecond
	closeGrace = 50 * time.Millisecond
	runGrace   = 80 * time.Millisecond
)
