package pgrouter

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leaserouter/leaserouter"
)

// Unknown outcomes of lease operations. Complete, Fail and Release may
// lose their reply (the connection fails, or the call's ctx ends, after
// the statement was sent) while the statement is still on its way or
// running: in the network, in a socket buffer, waiting for the job's row
// at the server. A read of the row at that moment sees the lease valid,
// and the operation may still commit a moment later: the read alone is
// no answer. So each such operation carries a random operation id, as a
// claim carries its claim id (see outcome.go): its transaction first
// takes the advisory lock on the id, and acts only if the id is not
// marked abandoned. The resolution of an unknown outcome, in one
// transaction on another connection, takes the advisory locks of the
// lease's operations left unknown (waiting for any of them still
// running), marks them abandoned, then reads the row: an operation that
// reaches the server later takes its lock after the resolution committed
// and finds its mark, so it changes nothing, and what the read found is
// final. (pgx itself sends a CancelRequest when a connection fails: it
// may cancel the statement if it is running when the request lands, and
// the resolution then finds it undone.) The marks share the table of abandoned claims (random 64-bit
// ids: the two never meet), and are deleted with them after a day.
//
// A backend's PID (from BackendKeyData) is not used instead, terminating
// it or waiting for it to end: poolers such as PgBouncer hand clients a
// PID of their own, which may name another session's backend, and a role
// may lack the right to signal it.

// opLock takes the operation's advisory lock ($1, its id) for the
// transaction: the first statement of its batch, so that the statement
// acting reads the abandoned marks after the lock is held. A resolver of
// the operation waits for it.
const opLock = claimLock

// notAbandoned is added to a resolvable operation's WHERE: it acts only
// if its id ($%d) is not marked abandoned.
const notAbandoned = ` AND NOT EXISTS (SELECT FROM leaserouter_abandoned_claims WHERE id = $%d)`

// abandonOps marks the operations of ids $1 abandoned.
const abandonOps = `INSERT INTO leaserouter_abandoned_claims (id) SELECT unnest($1::bigint[]) ON CONFLICT DO NOTHING`

// asyncCommit makes the resolution's transaction commit without waiting
// for its WAL to be flushed (or replicated): its marks only need to
// outlive the operations still on their way to this server, which a
// crash ends as well.
const asyncCommit = `SELECT set_config('synchronous_commit', 'off', true)`

// readLease reads job $2's current token, state and why its last lease
// ended, without locking it.
const readLease = `SELECT token, state, ended FROM leaserouter_jobs WHERE queue = $1 AND id = $2`

// end runs a resolvable lease operation (see op) ending l, on a
// connection of the pool acquired for it: a call that could not get one
// sent nothing, and leaves nothing to resolve.
func (l *Lease[T]) end(ctx context.Context, call, set string, args ...any) (opResult, error) {
	if l == nil || l.r == nil {
		return opResult{}, &leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease}
	}
	conn, err := l.r.db.Acquire(ctx)
	if err != nil {
		return opResult{}, errWrap(call, err)
	}
	defer conn.Release()
	return l.op(ctx, conn, false, newClaimID(), call, set, args...)
}

// unsure keeps id, an operation of l whose outcome is unknown, for the
// resolution.
func (l *Lease[T]) unsure(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = append(l.cut, id)
}

// resolved reports whether the job's row shows that this lease ended for
// reason, with every operation of l whose outcome was unknown settled
// first (see the comment at the top of this file): its answer is final.
// Used when a statement's outcome is unknown (the connection failed, or
// ctx ended, after it was sent). It reports false if it could not find
// out: the operations stay unsettled, for a later resolution.
func (l *Lease[T]) resolved(ctx context.Context, reason leaserouter.LostReason) bool {
	if l == nil || l.r == nil {
		return false
	}
	// The caller's ctx may be what failed the statement: the answer is
	// worth a short wait after it (the call still returns within 100ms of
	// its ctx's end), at most a lease's duration.
	ctx, cancel := withGrace(ctx, lastGrace)
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, l.r.opts.LeaseDuration)
	defer cancel2()
	l.mu.Lock()
	ids := slices.Clone(l.cut)
	l.mu.Unlock()
	slices.Sort(ids) // two resolutions of l lock the ids in the same order
	ids = slices.Compact(ids)
	b := &pgx.Batch{}
	if len(ids) > 0 {
		b.Queue(asyncCommit)
	}
	for _, id := range ids {
		b.Queue(opLock, id)
	}
	if len(ids) > 0 {
		b.Queue(abandonOps, ids)
	}
	b.Queue(readLease, l.r.opts.Queue, l.JobID)
	br := l.r.db.SendBatch(ctx, b)
	var err error
	if len(ids) > 0 {
		_, err = br.Exec()
	}
	for range ids {
		if err == nil {
			_, err = br.Exec()
		}
	}
	if err == nil && len(ids) > 0 {
		_, err = br.Exec()
	}
	var row opResult
	found := false
	if err == nil {
		err = br.QueryRow().Scan(&row.token, &row.was, &row.ended)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil // the row is gone (purged)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr // the marks commit with the batch's transaction: only then is the read final
	}
	if err != nil {
		return false
	}
	l.mu.Lock()
	l.cut = slices.DeleteFunc(l.cut, func(id int64) bool { _, ok := slices.BinarySearch(ids, id); return ok })
	l.mu.Unlock()
	return found && row.token != nil && row.was != nil && row.ended != nil && leaserouter.Token(*row.token) == l.Token &&
		*row.was != int16(leaserouter.StateLeased) && *row.ended == string(reason)
}

// Unknown outcomes. A statement whose reply never arrived (the connection
// failed, or the call's ctx ended, after it was sent) may or may not have
// committed. Lease operations resolve theirs before reporting (see
// above: an operation id, locked and marked as a claim id is). A
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
