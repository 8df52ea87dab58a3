package pgrouter

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

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
// the wait for a connection. A workerID that breaks the rule for IDs
// (see leaserouter.MaxIDBytes; "" is allowed) returns an error wrapping
// ErrInvalidOptions before anything else.
func (r *Router[T]) TryAcquire(ctx context.Context, workerID string) (*Lease[T], error) {
	return first(r.acquire(ctx, "TryAcquire", workerID, 1, false))
}

// TryAcquireMany leases up to max ready jobs to workerID (at most 1024,
// leaserouter.MaxBatch, in one call: unlike the core's), in the ready
// order, in one round trip; each lease is independent (its own token,
// increasing in slice order, expiry, heartbeats and completion). It
// returns at least one lease, or ErrNoJob, ErrClosed, ctx.Err(), an
// error wrapping ErrInvalidOptions for max < 1 or a workerID that breaks
// the rule for IDs, or one wrapping the driver's; ctx
// and a claim's unknown outcome as for TryAcquire.
func (r *Router[T]) TryAcquireMany(ctx context.Context, workerID string, max int) ([]*Lease[T], error) {
	return r.acquire(ctx, "TryAcquireMany", workerID, max, false)
}

// Acquire leases the next ready job to workerID, waiting until one is
// ready: woken by a notification from any process, by a timer at the
// queue's next due instant (a scheduled job's run-at, a lease's expiry),
// and at least every PollInterval. It returns ctx.Err() if ctx is done
// first (within milliseconds of its end, whatever the database does: see
// TryAcquire for a claim in flight then), ErrClosed after Close (or when
// Close starts while it waits), or an error wrapping the driver's (it
// does not retry a failed round trip). A workerID that breaks the rule
// for IDs returns an error wrapping ErrInvalidOptions at once.
func (r *Router[T]) Acquire(ctx context.Context, workerID string) (*Lease[T], error) {
	return first(r.acquire(ctx, "Acquire", workerID, 1, true))
}

// AcquireMany is TryAcquireMany, waiting as Acquire does until at least
// one job is ready; max < 1 or a workerID that breaks the rule for IDs
// is an error wrapping ErrInvalidOptions, at once.
func (r *Router[T]) AcquireMany(ctx context.Context, workerID string, max int) ([]*Lease[T], error) {
	return r.acquire(ctx, "AcquireMany", workerID, max, true)
}

// acquire is every Acquire form (call names it in errors): a single
// lease is a claim of one. It checks max and workerID before anything
// else, then claims once, or, with wait, until a job is ready.
func (r *Router[T]) acquire(ctx context.Context, call, workerID string, max int, wait bool) ([]*Lease[T], error) {
	if err := contract.ClaimMax(leaserouter.ErrInvalidOptions, call, max); err != nil {
		return nil, err
	}
	if err := contract.ValidateWorkerID(leaserouter.ErrInvalidOptions, workerID); err != nil {
		return nil, err
	}
	if wait {
		return r.await(orBackground(ctx), call, workerID, max)
	}
	ls, _, err := r.claim(orBackground(ctx), call, workerID, max, false, nil)
	return ls, err
}

// first is the one lease of a claim of one.
func first[T any](ls []*Lease[T], err error) (*Lease[T], error) {
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

func (r *Router[T]) await(ctx context.Context, call, workerID string, n int) ([]*Lease[T], error) {
	for {
		woken := r.wake.wait() // before trying: a wake-up during the try is not missed
		ls, due, err := r.claim(ctx, call, workerID, n, true, nil)
		if !errors.Is(err, leaserouter.ErrNoJob) {
			return ls, err
		}
		t := time.NewTimer(r.waitFor(due))
		unpark := r.wake.park(woken)
		select {
		case <-ctx.Done():
			unpark()
			t.Stop()
			return nil, ctx.Err()
		case <-woken:
		case <-t.C:
		}
		unpark()
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
// and resolved in the background (see outcome.go): the leases the claim
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
	sent := time.Now() // after the wait for a connection: "proven until" counts from here
	var end args
	if len(done) > 0 {
		end = r.endManyArgs(done, leaserouter.LostCompleted, true)
	}
	ops := endOpsOf(done)
	res := conn.SendBatch(ctx, r.claimBatch(id, done, end, ops, workerID, n, withDue))
	c, err := r.readClaim(res, workerID, sent, done, ops, withDue)
	if cerr := res.Close(); err == nil { // the commit of the batch's implicit transaction
		err = cerr
	}
	if err != nil {
		r.endUnknown(done, end)
		release()
		if unknownOutcome(err) {
			r.resolveClaim(id)
		}
		return nil, nil, claimErr(ctx, call, err)
	}
	slices.SortFunc(c.ls, func(a, b *Lease[T]) int { return cmp.Compare(a.Token, b.Token) })
	if len(done) > 0 {
		r.completedMany(done, c.completed)
		finished.ls = nil // committed: completed, or refused
	}
	closed, gone := r.granted(ctx, c, finished != nil)
	r.settledOn(ctx, conn, c.settled) // on this connection: the pool may have no other
	if gone {
		r.giveBack(ctx, conn, release, append(c.ls, c.bad...))
		if closed {
			return nil, nil, leaserouter.ErrClosed
		}
		return nil, nil, ctx.Err()
	}
	release()
	if err := r.failUndecodable(ctx, c); err != nil {
		return nil, nil, err
	}
	if len(c.ls) == 0 {
		return nil, c.due, leaserouter.ErrNoJob
	}
	return c.ls, c.due, nil
}

// claimMax is the most jobs one claim leases (leaserouter.MaxBatch, Run's
// largest batch).
const claimMax = leaserouter.MaxBatch

// claimBatch is a claim's one round trip: its advisory lock on the claim
// id, the completion of done (Run's finished leases, with end, their
// endManyArgs) and, if some earlier completion of theirs deleted rows
// with an unknown outcome (ops, endOpsOf), the read of its records, a
// settling round, the claim of up to n jobs, and, withDue, the next due
// instant.
func (r *Router[T]) claimBatch(id int64, done []*Lease[T], end args, ops []int64, workerID string, n int, withDue bool) *pgx.Batch {
	q := r.opts.Queue
	b := &pgx.Batch{}
	b.Queue(r.st.claimLock, args{"id": id})
	if len(done) > 0 {
		b.Queue(r.st.endLeases, end)
		if len(ops) > 0 {
			b.Queue(r.st.leasesEnded, args{"ops": ops})
		}
	}
	r.queueSettle(b)
	kinds := r.claimKinds()
	a := claimArgs(q, kinds, r.lease)
	a["n"], a["worker"], a["claim"] = min(n, claimMax), workerID, id
	b.Queue(r.st.claim(len(kinds)), a)
	if withDue {
		b.Queue(r.st.nextDue, args{"queue": q})
	}
	return b
}

// granted reports the grants of a claim that committed and counts them,
// and holds the leases (for Close) unless nobody is left to hand them to:
// Close began meanwhile (closed; it may have returned already), or the
// caller's ctx ended during the round trip (gone is true in both cases).
// run marks Run's leases as waiting their turn.
func (r *Router[T]) granted(ctx context.Context, c claimed[T], run bool) (closed, gone bool) {
	// The grants are reported first: before anything else this process
	// does to the leases can be (a Cancel, a revocation by Close).
	if r.ev != nil {
		evs := make([]leaserouter.Event, 0, len(c.ls)+len(c.bad))
		for _, l := range append(slices.Clone(c.ls), c.bad...) {
			e := l.event(leaserouter.EventLeaseAcquired, l.granted)
			e.Held, e.Wait, e.Requeued = 0, l.wait, l.requeued
			evs = append(evs, e)
		}
		slices.SortFunc(evs, func(a, b leaserouter.Event) int { return cmp.Compare(a.Token, b.Token) })
		r.emit(evs...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.LeasesGranted += uint64(len(c.ls) + len(c.bad))
	closed = r.closed
	gone = closed || ctx.Err() != nil
	if !gone {
		for _, l := range c.ls {
			l.idle.Store(run) // Run's: waiting its turn
			r.held[l] = struct{}{}
		}
	}
	return closed, gone
}

// giveBack hands back leases granted to nobody (see granted), unstarted:
// on conn, or in the background if ctx ended or that failed (conn is
// released first then, with release).
func (r *Router[T]) giveBack(ctx context.Context, conn querier, release func(), back []*Lease[T]) {
	if ctx.Err() == nil && r.handBack(ctx, conn, back) {
		return
	}
	release()
	r.handBackLater(back)
}

// failUndecodable fails the attempts of the leases whose payloads this
// process cannot decode (retried after Backoff, in any process, until
// dead); if no lease is left, it returns the first one's error.
func (r *Router[T]) failUndecodable(ctx context.Context, c claimed[T]) error {
	for _, l := range c.bad {
		_ = l.Fail(ctx, c.badPayload[l])
	}
	if len(c.bad) > 0 && len(c.ls) == 0 {
		return c.badPayload[c.bad[0]]
	}
	return nil
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
	completed  map[leaseKey]ended // the finished leases completed
	settled    settling
	ls, bad    []*Lease[T] // the leases granted: payload decoded, or not
	badPayload map[*Lease[T]]error
	due        *float64
}

// readClaim reads the results of claim's batch, sent at sent.
func (r *Router[T]) readClaim(res pgx.BatchResults, workerID string, sent time.Time, done []*Lease[T], ops []int64, withDue bool) (claimed[T], error) {
	c := claimed[T]{badPayload: map[*Lease[T]]error{}}
	if _, err := res.Exec(); err != nil { // r.st.claimLock
		return c, err
	}
	var err error
	if len(done) > 0 {
		if c.completed, err = readEnded(res.Query()); err != nil {
			return c, err
		}
		if len(ops) > 0 {
			at, err := readEndedBy(res.Query())
			if err != nil {
				return c, err
			}
			endedBy(done, c.completed, at)
		}
	}
	if c.settled, err = readSettle(res); err != nil {
		return c, err
	}
	rows, err := res.Query()
	if err != nil {
		return c, err
	}
	// Declared once per claim, not per row: a variable Scan takes escapes,
	// one allocation each (meta is decoded before the next row's scan).
	var (
		kind string
		arm  int32
		meta []byte
	)
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
			timeout  int64
		)
		if err := rows.Scan(&id, &kind, &arm, &meta, &payload, &attempt, &token, &progress, &expiry, &granted, &readyAt,
			&requeued, &timeout); err != nil {
			rows.Close()
			return c, err
		}
		l := &Lease[T]{JobID: id, Attempt: int(attempt), Token: leaserouter.Token(token), WorkerID: workerID,
			Progress: progress, r: r, expiry: expiry, proven: sent.Add(r.opts.LeaseDuration),
			granted: granted, wait: max(0, granted.Sub(readyAt)), requeued: requeued,
			timeout: microsDuration(timeout), kind: kind, arm: int(arm) - 1}
		if meta != nil {
			if l.meta, err = decodeMetadata(id, meta); err != nil {
				c.bad, c.badPayload[l] = append(c.bad, l), err
				continue
			}
		}
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
