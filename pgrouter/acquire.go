package pgrouter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// settleDue settles what is due in the queue at the database's clock, at
// most $2 items of each kind, oldest first: expired leases (pending again
// with the expiry instant as ready time, or dead when attempts are
// exhausted) and scheduled jobs whose run-at has come (pending, their
// run-at as ready time). Rows another transaction holds are skipped
// (their holder is acting on them). It returns how many expired leases
// became pending, how many became dead, how many scheduled jobs became
// pending.
const settleDue = `
WITH c AS (SELECT clock_timestamp() AS now),
exp AS (
	UPDATE leaserouter_jobs j SET
		state = CASE WHEN j.attempt >= j.max_attempts THEN 4 ELSE 0 END,
		ready_at = j.lease_expires_at, requeued = j.attempt < j.max_attempts,
		ended = 'expired', last_error = 'lease expired', owner = '',
		updated_at = j.lease_expires_at, lease_expires_at = NULL,
		purge_at = CASE WHEN j.attempt >= j.max_attempts THEN j.lease_expires_at + $3 * interval '1 microsecond' END
	FROM (SELECT queue, id FROM leaserouter_jobs
		WHERE queue = $1 AND state = 2 AND lease_expires_at <= (SELECT now FROM c)
		ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
	WHERE j.queue = d.queue AND j.id = d.id
	RETURNING j.state),
sch AS (
	UPDATE leaserouter_jobs j SET state = 0, updated_at = j.ready_at
	FROM (SELECT queue, id FROM leaserouter_jobs
		WHERE queue = $1 AND state = 1 AND ready_at <= (SELECT now FROM c)
		ORDER BY ready_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
	WHERE j.queue = d.queue AND j.id = d.id
	RETURNING 1)
SELECT (SELECT count(*) FROM exp WHERE state = 0), (SELECT count(*) FROM exp WHERE state = 4), (SELECT count(*) FROM sch)`

// settleLimit bounds the items of each kind one settleDue settles.
const settleLimit = 1000

// settle runs settleDue on its own and counts what it settled.
func (r *Router[T]) settle(ctx context.Context) {
	var requeued, dead, ready int64
	if err := r.db.QueryRow(ctx, settleDue, r.opts.Queue, settleLimit, r.keep).Scan(&requeued, &dead, &ready); err == nil {
		r.settled(ctx, requeued, dead, ready)
	}
}

// settled counts what a settleDue settled (leases expired into pending
// or dead jobs, scheduled jobs made ready) and wakes the queue's waiters
// in every process if jobs became ready.
func (r *Router[T]) settled(ctx context.Context, requeued, dead, ready int64) {
	r.mu.Lock()
	r.stats.Expirations += uint64(requeued + dead)
	r.stats.Dead += uint64(dead)
	r.mu.Unlock()
	if requeued > 0 || ready > 0 {
		r.notify(ctx)
	}
}

// claimJobs leases up to $2 pending jobs of the queue to worker $3 for $4
// microseconds, in the ready order (priority, ready time, enqueue order),
// skipping rows other claimers hold. Tokens are taken after the rows are
// ordered, so they increase in the ready order.
const claimJobs = `
WITH picked AS (
	SELECT queue, id, priority, ready_at, seq FROM leaserouter_jobs
	WHERE queue = $1 AND state = 0
	ORDER BY priority DESC, ready_at, seq
	LIMIT $2 FOR UPDATE SKIP LOCKED),
numbered AS (
	SELECT queue, id, nextval('leaserouter_token') AS token
	FROM (SELECT * FROM picked ORDER BY priority DESC, ready_at, seq) p),
c AS (SELECT clock_timestamp() AS now)
UPDATE leaserouter_jobs j SET
	state = 2, token = n.token, attempt = j.attempt + 1, owner = $3, ended = '',
	lease_expires_at = c.now + $4 * interval '1 microsecond', updated_at = c.now
FROM numbered n, c
WHERE j.queue = n.queue AND j.id = n.id
RETURNING j.id, j.payload, j.attempt, j.token, j.progress, j.lease_expires_at`

// nextDue is how long, in seconds on the database's clock, until the
// queue's next scheduled job is ready or its next lease expires; NULL if
// neither exists.
const nextDue = `
SELECT extract(epoch FROM least(
	(SELECT min(ready_at) FROM leaserouter_jobs WHERE queue = $1 AND state = 1),
	(SELECT min(lease_expires_at) FROM leaserouter_jobs WHERE queue = $1 AND state = 2)) - clock_timestamp())::float8`

// TryAcquire leases the next ready job to workerID without waiting, after
// settling what is due: ErrNoJob if none is ready, ErrClosed after Close,
// or an error wrapping the driver's. One round trip.
func (r *Router[T]) TryAcquire(ctx context.Context, workerID string) (*Lease[T], error) {
	ls, _, err := r.claim(orBackground(ctx), "TryAcquire", workerID, 1, false, nil)
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// TryAcquireMany leases up to max ready jobs to workerID, in the ready
// order, in one round trip; each lease is independent (its own token,
// increasing in slice order, expiry, heartbeats and completion). It
// returns at least one lease, or ErrNoJob, ErrClosed, an error wrapping
// ErrInvalidOptions for max < 1, or one wrapping the driver's.
func (r *Router[T]) TryAcquireMany(ctx context.Context, workerID string, max int) ([]*Lease[T], error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: TryAcquireMany max is %d, must be >= 1", leaserouter.ErrInvalidOptions, max)
	}
	ls, _, err := r.claim(orBackground(ctx), "TryAcquireMany", workerID, max, false, nil)
	return ls, err
}

// Acquire leases the next ready job to workerID, waiting until one is
// ready: woken by a notification from any process, by a timer at the
// queue's next due instant (a scheduled job's run-at, a lease's expiry),
// and at least every PollInterval. It returns ctx.Err() if ctx is done
// first, ErrClosed after Close (or when Close starts while it waits), or
// an error wrapping the driver's (it does not retry a failed round trip).
func (r *Router[T]) Acquire(ctx context.Context, workerID string) (*Lease[T], error) {
	ls, err := r.await(orBackground(ctx), "Acquire", workerID, 1)
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// AcquireMany is TryAcquireMany, waiting as Acquire does until at least
// one job is ready; max < 1 is an error wrapping ErrInvalidOptions.
func (r *Router[T]) AcquireMany(ctx context.Context, workerID string, max int) ([]*Lease[T], error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: AcquireMany max is %d, must be >= 1", leaserouter.ErrInvalidOptions, max)
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

// claim completes the leases of done (Run's: their handlers returned nil;
// a lease no longer valid is refused, counted), settles what is due and
// leases up to max jobs, in one round trip (a pgx.Batch, one implicit
// transaction: on an error none of it happened); withDue also asks how
// long until the next due instant, for a caller about to wait.
func (r *Router[T]) claim(ctx context.Context, call, workerID string, max int, withDue bool, done []*Lease[T]) ([]*Lease[T], *float64, error) {
	if err := r.open(); err != nil {
		return nil, nil, err
	}
	q := r.opts.Queue
	b := &pgx.Batch{}
	if len(done) > 0 {
		ids, tokens := leaseKeys(done)
		b.Queue(completeMany, q, ids, tokens, r.keep)
	}
	b.Queue(settleDue, q, settleLimit, r.keep)
	b.Queue(claimJobs, q, max, workerID, r.lease)
	if withDue {
		b.Queue(nextDue, q)
	}
	// The round trip outlives the caller's ctx (bounded by a lease): a
	// claim that commits while ctx ends must hand its leases back rather
	// than strand them until they expire, burning an attempt.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.LeaseDuration)
	defer cancel()
	sent := time.Now()
	res := r.db.SendBatch(bg, b)
	defer res.Close()
	var completed int64
	if len(done) > 0 {
		tag, err := res.Exec()
		if err != nil {
			return nil, nil, errWrap(call, err)
		}
		completed = tag.RowsAffected()
	}
	var requeued, dead, ready int64
	if err := res.QueryRow().Scan(&requeued, &dead, &ready); err != nil {
		return nil, nil, errWrap(call, err)
	}
	rows, err := res.Query()
	if err != nil {
		return nil, nil, errWrap(call, err)
	}
	var ls, bad []*Lease[T]
	badPayload := map[*Lease[T]]error{}
	for rows.Next() {
		var (
			id       string
			payload  []byte
			attempt  int32
			token    int64
			progress []byte
			expiry   time.Time
		)
		if err := rows.Scan(&id, &payload, &attempt, &token, &progress, &expiry); err != nil {
			rows.Close()
			return nil, nil, errWrap(call, err)
		}
		l := &Lease[T]{JobID: id, Attempt: int(attempt), Token: leaserouter.Token(token), WorkerID: workerID,
			Progress: progress, r: r, expiry: expiry, proven: sent.Add(r.opts.LeaseDuration)}
		if l.Payload, err = decode[T](id, payload); err != nil {
			bad, badPayload[l] = append(bad, l), err
			continue
		}
		ls = append(ls, l)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, errWrap(call, err)
	}
	var due *float64
	if withDue {
		if err := res.QueryRow().Scan(&due); err != nil {
			return nil, nil, errWrap(call, err)
		}
	}
	if err := res.Close(); err != nil { // the commit of the batch's implicit transaction
		return nil, nil, errWrap(call, err)
	}
	slices.SortFunc(ls, func(a, b *Lease[T]) int { return cmp.Compare(a.Token, b.Token) })
	for _, l := range done {
		r.release(l)
	}
	r.mu.Lock()
	r.stats.StaleRejections += uint64(int64(len(done)) - completed)
	r.stats.LeasesGranted += uint64(len(ls))
	closed := r.closed
	if !closed {
		for _, l := range ls {
			r.held[l] = struct{}{}
		}
	}
	r.mu.Unlock()
	r.settled(bg, requeued, dead, ready)
	// Granted, but nobody to hand them to: Close began meanwhile (it may
	// have returned already), or the caller's ctx ended during the round
	// trip. Hand them back unstarted.
	if closed || ctx.Err() != nil {
		r.handBack(bg, append(ls, bad...))
		if closed {
			return nil, nil, leaserouter.ErrClosed
		}
		return nil, nil, ctx.Err()
	}
	if len(bad) > 0 {
		// Payloads this process cannot decode: fail those attempts (retried
		// after Backoff, in any process, until dead), keep the others.
		for _, l := range bad {
			_ = l.Fail(bg, badPayload[l])
		}
		if len(ls) == 0 {
			return nil, nil, badPayload[bad[0]]
		}
	}
	if len(ls) == 0 {
		return nil, due, leaserouter.ErrNoJob
	}
	return ls, due, nil
}
