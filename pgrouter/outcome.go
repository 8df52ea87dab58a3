package pgrouter

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// Unknown outcomes of lease operations. Complete, Fail and Release may
// lose their reply (the connection fails, or the call's ctx ends, after
// the statement was sent) while the statement is still on its way or
// running: in the network, in a socket buffer, waiting for the job's row
// at the server. A read of the row at that moment sees the lease valid,
// and the operation may still commit a moment later: the read alone is
// no answer. So each such operation carries a random operation id, as a
// claim carries its claim id (see resolve.go): its transaction first
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
