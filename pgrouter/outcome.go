package pgrouter

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leaserouter/leaserouter"
)

// Unknown outcomes of lease operations. Complete, Fail, Release and Snooze may
// lose their reply (the connection fails, or the call's ctx ends, after
// the statement was sent) while the statement is still on its way or
// running: in the network, in a socket buffer, waiting for the job's row
// at the server. A read of the row at that moment sees the lease valid,
// and the operation may still commit a moment later: the read alone is
// no answer. So each such operation carries a random operation id, as a
// claim carries its claim id (see below): its transaction first
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

// end runs a resolvable lease operation (see op) ending l for reason
// (lease_end.sql, with extra's arguments for a failure or a snooze), on a
// connection of the pool acquired for it: a call that could not get one
// sent nothing, and leaves nothing to resolve.
func (l *Lease[T]) end(ctx context.Context, call string, reason leaserouter.LostReason, extra args) (opResult, error) {
	if l == nil || l.r == nil {
		return opResult{}, &leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease}
	}
	conn, err := l.r.db.Acquire(ctx)
	if err != nil {
		return opResult{}, errWrap(call, err)
	}
	defer conn.Release()
	id := newClaimID()
	a := l.endArgs(reason)
	a["op"] = id
	maps.Copy(a, extra)
	return l.op(ctx, conn, false, id, call, l.r.st.endLease, a)
}

// endByHolder is a holder's end of l for reason (Fail, Release,
// Snooze): end, then the holder's KeepAlives told at once
// (contract.EndedByHolder). answered is false when there is no result to
// report events from: err says why, or, nil, the statement's outcome was
// unknown and resolved shows l ended for reason — l is released then,
// its events unknown here. When answered, the caller reports the events
// and then releases l.
func (l *Lease[T]) endByHolder(ctx context.Context, call string, reason leaserouter.LostReason, extra args) (res opResult, answered bool, err error) {
	res, err = l.end(ctx, call, reason, extra)
	if err == nil {
		l.r.keepers.holderEnded(l, reason)
		return res, true, nil
	}
	if !errors.As(err, new(*leaserouter.LeaseLostError)) && l.resolved(ctx, reason) {
		l.r.keepers.holderEnded(l, reason)
		l.r.release(l)
		return res, false, nil
	}
	return res, false, err
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
		b.Queue(l.r.st.asyncCommit)
	}
	for _, id := range ids {
		b.Queue(l.r.st.claimLock, args{"id": id})
	}
	if len(ids) > 0 {
		b.Queue(l.r.st.abandon, args{"ids": ids})
	}
	b.Queue(l.r.st.inspectLeases, args{"queue": l.r.opts.Queue, "ids": []string{l.JobID}})
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
		err = br.QueryRow().Scan(&row.id, &row.token, &row.was, &row.ended, &row.live)
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
		!isState(row.was, leaserouter.StateLeased) && *row.ended == string(reason)
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

// newClaimID is a random claim id (never 0), also used as a lease
// operation's id (see above).
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
	b.Queue(r.st.claimLock, args{"id": id})
	b.Queue(r.st.abandon, args{"ids": []int64{id}})
	b.Queue(r.st.handBackClaim, args{"queue": r.opts.Queue, "claim": id})
	b.Queue(r.st.undoClaimExpiry, args{"queue": r.opts.Queue, "claim": id, "lease_us": r.lease})
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
