package pgrouter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// settleExpired settles the queue's expired leases at the database's
// clock, at most $2, oldest first: each job is pending again with its
// expiry instant as ready time, or dead when its attempts are exhausted
// (purged Retention, $3 microseconds, later). Rows another transaction
// holds are skipped (their holder is acting on them). It returns each
// job settled: ID, token, attempt, new state, expiry, holder, grant
// instant (NULL for a lease granted before schema version 4).
const settleExpired = `
UPDATE leaserouter_jobs j SET
	state = CASE WHEN j.attempt >= j.max_attempts THEN 4 ELSE 0 END,
	ready_at = j.lease_expires_at, requeued = j.attempt < j.max_attempts,
	ended = 'expired', last_error = 'lease expired', owner = '',
	updated_at = j.lease_expires_at, lease_expires_at = NULL,
	purge_at = CASE WHEN j.attempt >= j.max_attempts THEN j.lease_expires_at + $3 * interval '1 microsecond' END
FROM (SELECT queue, id, owner FROM leaserouter_jobs
	WHERE queue = $1 AND state = 2 AND lease_expires_at <= (SELECT clock_timestamp())
	ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
WHERE j.queue = d.queue AND j.id = d.id
RETURNING j.id, j.token, j.attempt, j.state, j.ready_at, d.owner, j.leased_at`

// settleScheduled makes the queue's scheduled jobs whose run-at has come
// pending, at most $2, with their run-at as ready time, and returns how
// many.
const settleScheduled = `
WITH sch AS (
	UPDATE leaserouter_jobs j SET state = 0, updated_at = j.ready_at
	FROM (SELECT queue, id FROM leaserouter_jobs
		WHERE queue = $1 AND state = 1 AND ready_at <= (SELECT clock_timestamp())
		ORDER BY ready_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
	WHERE j.queue = d.queue AND j.id = d.id
	RETURNING 1)
SELECT count(*) FROM sch`

// settleLimit bounds the items of each kind one settling settles.
const settleLimit = 1000

// settling is what one settling round found: the leases it expired and
// how many scheduled jobs it made ready.
type settling struct {
	expired []leaserouter.Event // EventLeaseExpired, each followed by EventDead when the job died
	dead    int
	ready   int64
}

// queueSettle adds a settling round's two statements to b.
func (r *Router[T]) queueSettle(b *pgx.Batch) {
	b.Queue(settleExpired, r.opts.Queue, settleLimit, r.keep)
	b.Queue(settleScheduled, r.opts.Queue, settleLimit)
}

// readSettle reads the results of queueSettle's statements.
func readSettle(res pgx.BatchResults) (settling, error) {
	var s settling
	rows, err := res.Query()
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var (
			id, owner string
			token     int64
			attempt   int32
			state     int16
			expiry    time.Time
			granted   *time.Time
		)
		if err := rows.Scan(&id, &token, &attempt, &state, &expiry, &owner, &granted); err != nil {
			rows.Close()
			return s, err
		}
		e := leaserouter.Event{Kind: leaserouter.EventLeaseExpired, Time: expiry, JobID: id, WorkerID: owner,
			Token: leaserouter.Token(token), Attempt: int(attempt), Held: heldUntil(granted, expiry)}
		s.expired = append(s.expired, e)
		if leaserouter.State(state) == leaserouter.StateFailed {
			e.Kind, e.Err, e.Held = leaserouter.EventDead, errLeaseExpired, 0
			s.expired = append(s.expired, e)
			s.dead++
		}
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	err = res.QueryRow().Scan(&s.ready)
	return s, err
}

// errLeaseExpired is the Err of EventDead for a job whose last lease
// expired.
var errLeaseExpired = errors.New("lease expired")

// settle runs a settling round on its own.
func (r *Router[T]) settle(ctx context.Context) {
	b := &pgx.Batch{}
	r.queueSettle(b)
	res := r.db.SendBatch(ctx, b)
	s, err := readSettle(res)
	if cerr := res.Close(); err == nil && cerr == nil {
		r.settled(ctx, s)
	}
}

// settled counts and reports what a settling round settled, and wakes the
// queue's waiters in every process if jobs became ready.
func (r *Router[T]) settled(ctx context.Context, s settling) { r.settledOn(ctx, r.db, s) }

// settledOn is settled, notifying on q.
func (r *Router[T]) settledOn(ctx context.Context, q querier, s settling) {
	if len(s.expired) == 0 && s.ready == 0 {
		return
	}
	r.mu.Lock()
	r.stats.Expirations += uint64(len(s.expired) - s.dead)
	r.stats.Dead += uint64(s.dead)
	r.mu.Unlock()
	r.ev.add(s.expired...)
	if len(s.expired) > s.dead || s.ready > 0 {
		r.notifyOn(ctx, q)
	}
}

// claimJobs leases up to $2 pending jobs of the queue to worker $3 for $4
// microseconds, in the ready order (priority, ready time, enqueue order),
// skipping rows other claimers hold, and writes the claim id $5 on them
// (nothing, if the claim was abandoned: see resolve.go). Tokens are taken
// after the rows are ordered, so they increase in the ready order.
const claimJobs = `
WITH picked AS (
	SELECT queue, id, priority, ready_at, seq FROM leaserouter_jobs
	WHERE queue = $1 AND state = 0
		AND NOT EXISTS (SELECT FROM leaserouter_abandoned_claims WHERE id = $5)
	ORDER BY priority DESC, ready_at, seq
	LIMIT $2 FOR UPDATE SKIP LOCKED),
numbered AS (
	SELECT queue, id, nextval('leaserouter_token') AS token
	FROM (SELECT * FROM picked ORDER BY priority DESC, ready_at, seq) p),
c AS (SELECT clock_timestamp() AS now)
UPDATE leaserouter_jobs j SET
	state = 2, token = n.token, attempt = j.attempt + 1, owner = $3, ended = '', claim = $5,
	lease_expires_at = c.now + $4 * interval '1 microsecond', updated_at = c.now, leased_at = c.now
FROM numbered n, c
WHERE j.queue = n.queue AND j.id = n.id
RETURNING j.id, j.payload, j.attempt, j.token, j.progress, j.lease_expires_at, j.updated_at, j.ready_at, j.requeued`

// nextDue is how long, in seconds on the database's clock, until the
// queue's next scheduled job is ready or its next lease expires; NULL if
// neither exists.
const nextDue = `
SELECT extract(epoch FROM least(
	(SELECT min(ready_at) FROM leaserouter_jobs WHERE queue = $1 AND state = 1),
	(SELECT min(lease_expires_at) FROM leaserouter_jobs WHERE queue = $1 AND state = 2)) - clock_timestamp())::float8`

// TryAcquire leases the next ready job to workerID without waiting, after
// settling what is due: ErrNoJob if none is ready, ErrClosed after Close,
// ctx.Err() once ctx is done, or an error wrapping the driver's. One
// round trip, on one connection of the pool. It waits for nothing longer
// than ctx allows (a pool connection, the reply) and returns within
// milliseconds of ctx's end. A claim whose reply never arrived (ctx
// ended, or the connection failed, after it was sent) may have leased a
// job: the Router resolves that in the background, handing such leases
// back with the attempt not counted (see the package doc, Faults). The
// lease is proven valid for LeaseDuration from the claim's send, after
// the wait for a connection. A workerID leaserouter.ValidateWorkerID
// refuses returns its error (wrapping ErrInvalidOptions, as the core's)
// before anything else.
func (r *Router[T]) TryAcquire(ctx context.Context, workerID string) (*Lease[T], error) {
	if err := leaserouter.ValidateWorkerID(workerID); err != nil {
		return nil, err
	}

	ls, _, err := r.claim(orBackground(ctx), "TryAcquire", workerID, 1, false, nil)
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// TryAcquireMany leases up to max ready jobs to workerID, in the ready
// order, in one round trip; each lease is independent (its own token,
// increasing in slice order, expiry, heartbeats and completion). It
// returns at least one lease, or ErrNoJob, ErrClosed, ctx.Err(), an
// error wrapping ErrInvalidOptions for max < 1 or a workerID
// leaserouter.ValidateWorkerID refuses, or one wrapping the driver's; ctx
// and a claim's unknown outcome as for TryAcquire.
func (r *Router[T]) TryAcquireMany(ctx context.Context, workerID string, max int) ([]*Lease[T], error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: TryAcquireMany max is %d, must be >= 1", leaserouter.ErrInvalidOptions, max)
	}
	if err := leaserouter.ValidateWorkerID(workerID); err != nil {
		return nil, err
	}
	ls, _, err := r.claim(orBackground(ctx), "TryAcquireMany", workerID, max, false, nil)
	return ls, err
}

// Acquire leases the next ready job to workerID, waiting until one is
// ready: woken by a notification from any process, by a timer at the
// queue's next due instant (a scheduled job's run-at, a lease's expiry),
// and at least every PollInterval. It returns ctx.Err() if ctx is done
// first (within milliseconds of its end, whatever the database does: see
// TryAcquire for a claim in flight then), ErrClosed after Close (or when
// Close starts while it waits), or an error wrapping the driver's (it
// does not retry a failed round trip). A workerID
// leaserouter.ValidateWorkerID refuses returns its error (wrapping
// ErrInvalidOptions) at once.
func (r *Router[T]) Acquire(ctx context.Context, workerID string) (*Lease[T], error) {
	if err := leaserouter.ValidateWorkerID(workerID); err != nil {
		return nil, err
	}

	ls, err := r.await(orBackground(ctx), "Acquire", workerID, 1)
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// AcquireMany is TryAcquireMany, waiting as Acquire does until at least
// one job is ready; max < 1 or a workerID leaserouter.ValidateWorkerID
// refuses is an error wrapping ErrInvalidOptions, at once.
func (r *Router[T]) AcquireMany(ctx context.Context, workerID string, max int) ([]*Lease[T], error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: AcquireMany max is %d, must be >= 1", leaserouter.ErrInvalidOptions, max)
	}
	if err := leaserouter.ValidateWorkerID(workerID); err != nil {
		return nil, err
	}
	return r.await(orBackground(ctx), "AcquireMany", workerID, max)
}

func (r *Router[T]) await(ctx context.Context, call, workerID string, n int) ([]*Lease[T], error) {
	for {
		woken := r.wake.wait() // before trying: a wake-up during the try is not missed
		ls, due, err := r.claim(ctx, call, workerID, n, true, nil)
		if !errors.Is(err, leaserouter.ErrNoJob) {
			return ls, err
		}
		t := time.NewTimer(r.waitFor(due))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}

// waitFor is how long a waiter with nothing ready sleeps, unless woken:
// until the next due instant (due seconds from now, nil if none), at
// most PollInterval. A due instant already past belongs to a row another
// transaction holds (claims settle the others): it is polled every
// lockedPoll, not in a loop.
func (r *Router[T]) waitFor(due *float64) time.Duration {
	poll := r.opts.PollInterval
	switch {
	case due == nil:
		return poll
	case *due <= 0:
		return min(poll, lockedPoll)
	case *due >= poll.Seconds(): // also keeps a far-off instant from overflowing a Duration
		return poll
	}
	return time.Duration(*due*float64(time.Second)) + time.Millisecond
}

// lockedPoll is how often a waiter looks again at a due row another
// transaction holds.
const lockedPoll = 100 * time.Millisecond

// claim completes the leases finished.take returns (Run's: their
// handlers returned nil; a lease no longer valid is refused, counted),
// taken only once the claim holds a connection (until then they are the
// heartbeat rounds' to complete, however long the pool makes it wait);
// finished.ls is what it took and did not complete (nil once that
// committed). It settles what is due and leases up to n jobs,
// in one round trip on one connection (a pgx.Batch, one implicit
// transaction); withDue also asks how long until the next due instant,
// for a caller about to wait. It waits for ctx only: for room in the
// event backlog, for a connection of the pool, for the reply. On an
// error nothing happened, or, when the reply was lost (the connection
// failed, or ctx ended, after the batch was sent), the outcome is unknown
// and resolved in the background (see resolve.go): the leases the claim
// may have granted are handed back, the attempt not counted. A lease is
// proven for LeaseDuration from the batch's send, after the wait for the
// connection.
func (r *Router[T]) claim(ctx context.Context, call, workerID string, n int, withDue bool, finished *finished[T]) ([]*Lease[T], *float64, error) {
	if err := r.open(); err != nil {
		return nil, nil, err
	}
	if finished == nil { // Run (finished != nil) waits for room itself, until it stops, before it takes its finished leases (they must not wait)
		if err := r.ev.awaitRoom(ctx); err != nil {
			return nil, nil, err
		}
	}
	conn, err := r.db.Acquire(ctx)
	if err != nil {
		return nil, nil, claimErr(ctx, call, err)
	}
	release := sync.OnceFunc(conn.Release)
	defer release()
	var done []*Lease[T]
	if finished != nil {
		done = finished.take()
		finished.ls = done
	}
	id := newClaimID()
	q := r.opts.Queue
	b := &pgx.Batch{}
	b.Queue(claimLock, id)
	if len(done) > 0 {
		ids, tokens := leaseKeys(done)
		b.Queue(completeMany, q, ids, tokens, r.keep)
	}
	r.queueSettle(b)
	b.Queue(claimJobs, q, n, workerID, r.lease, id)
	if withDue {
		b.Queue(nextDue, q)
	}
	sent := time.Now() // after the wait for a connection: "proven until" counts from here
	res := conn.SendBatch(ctx, b)
	c, err := r.readClaim(res, workerID, sent, len(done) > 0, withDue)
	if cerr := res.Close(); err == nil { // the commit of the batch's implicit transaction
		err = cerr
	}
	if err != nil {
		release()
		if unknownOutcome(err) {
			r.resolveClaim(id)
		}
		return nil, nil, claimErr(ctx, call, err)
	}
	ls := c.ls
	slices.SortFunc(ls, func(a, b *Lease[T]) int { return cmp.Compare(a.Token, b.Token) })
	if len(done) > 0 {
		r.completedMany(done, c.completed)
		finished.ls = nil // committed: completed, or refused
	}
	// The grants are reported first: before anything else this process
	// does to the leases can be (a Cancel, a revocation by Close).
	if r.ev != nil {
		evs := make([]leaserouter.Event, 0, len(ls)+len(c.bad))
		for _, l := range append(slices.Clone(ls), c.bad...) {
			e := l.event(leaserouter.EventLeaseAcquired, l.granted)
			e.Held, e.Wait, e.Requeued = 0, l.wait, l.requeued
			evs = append(evs, e)
		}
		slices.SortFunc(evs, func(a, b leaserouter.Event) int { return cmp.Compare(a.Token, b.Token) })
		r.ev.add(evs...)
	}
	r.mu.Lock()
	r.stats.LeasesGranted += uint64(len(ls) + len(c.bad))
	closed := r.closed
	gone := closed || ctx.Err() != nil
	if !gone {
		for _, l := range ls {
			l.idle.Store(finished != nil) // Run's: waiting its turn
			r.held[l] = struct{}{}
		}
	}
	r.mu.Unlock()
	r.settledOn(ctx, conn, c.settled) // on this connection: the pool may have no other
	// Granted, but nobody to hand them to: Close began meanwhile (it may
	// have returned already), or the caller's ctx ended during the round
	// trip. Hand them back unstarted (in the background if ctx ended).
	if gone {
		back := append(ls, c.bad...)
		if ctx.Err() != nil || !r.handBack(ctx, conn, back) {
			release()
			r.later(func(ctx context.Context) error { return r.handBackErr(ctx, r.db, back) })
		}
		if closed {
			return nil, nil, leaserouter.ErrClosed
		}
		return nil, nil, ctx.Err()
	}
	release()
	if len(c.bad) > 0 {
		// Payloads this process cannot decode: fail those attempts (retried
		// after Backoff, in any process, until dead), keep the others.
		for _, l := range c.bad {
			_ = l.Fail(ctx, c.badPayload[l])
		}
		if len(ls) == 0 {
			return nil, nil, c.badPayload[c.bad[0]]
		}
	}
	if len(ls) == 0 {
		return nil, c.due, leaserouter.ErrNoJob
	}
	return ls, c.due, nil
}

// claimErr is a claim's error: ctx.Err() once ctx is done (whatever the
// driver made of it), else the driver's, wrapped.
func claimErr(ctx context.Context, call string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errWrap(call, err)
}

// claimed is what a claim's batch returned.
type claimed[T any] struct {
	completed  map[leaseKey]time.Time // the finished leases completed, with the instant
	settled    settling
	ls, bad    []*Lease[T] // the leases granted: payload decoded, or not
	badPayload map[*Lease[T]]error
	due        *float64
}

// readClaim reads the results of claim's batch, sent at sent.
func (r *Router[T]) readClaim(res pgx.BatchResults, workerID string, sent time.Time, withDone, withDue bool) (claimed[T], error) {
	c := claimed[T]{badPayload: map[*Lease[T]]error{}}
	if _, err := res.Exec(); err != nil { // claimLock
		return c, err
	}
	var err error
	if withDone {
		if c.completed, err = readInstants(res.Query()); err != nil {
			return c, err
		}
	}
	if c.settled, err = readSettle(res); err != nil {
		return c, err
	}
	rows, err := res.Query()
	if err != nil {
		return c, err
	}
	for rows.Next() {
		var (
			id       string
			payload  []byte
			attempt  int32
			token    int64
			progress []byte
			expiry   time.Time
			granted  time.Time
			readyAt  time.Time
			requeued bool
		)
		if err := rows.Scan(&id, &payload, &attempt, &token, &progress, &expiry, &granted, &readyAt, &requeued); err != nil {
			rows.Close()
			return c, err
		}
		l := &Lease[T]{JobID: id, Attempt: int(attempt), Token: leaserouter.Token(token), WorkerID: workerID,
			Progress: progress, r: r, expiry: expiry, proven: sent.Add(r.opts.LeaseDuration),
			granted: granted, wait: max(0, granted.Sub(readyAt)), requeued: requeued}
		if l.Payload, err = decode[T](id, payload); err != nil {
			c.bad, c.badPayload[l] = append(c.bad, l), err
			continue
		}
		c.ls = append(c.ls, l)
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	if withDue {
		if err := res.QueryRow().Scan(&c.due); err != nil {
			return c, err
		}
	}
	return c, nil
}
