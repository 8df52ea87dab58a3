package pgrouter

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// CompleteTx completes the lease as part of the caller's transaction tx:
// the job is succeeded if and only if tx commits, and the row stays locked
// by tx until then, so no other lease of the job can be granted meanwhile
// (even if this one's expiry passes): work in tx after CompleteTx, before
// the commit, is safe however long it takes. Write the job's result in
// the same tx, after Fence, and a stale worker can never overwrite a newer
// attempt's. If tx rolls back, the lease is as it was before CompleteTx
// (its expiry as of its last accepted heartbeat, which no heartbeat could
// extend while tx locked the row: it may have passed).
//
// The check and the completion run under a savepoint of CompleteTx's own
// in tx, in one round trip. On success the savepoint is left in place: it
// commits or rolls back with tx (or with a savepoint of the caller's
// enclosing it), and tx's later statements run inside it. A refusal is a
// *LeaseLostError, returned after rolling back to the savepoint (a second
// round trip): tx stays usable and the job's row is not left locked, so a
// stale caller's open transaction never blocks the lease's valid holder
// (a caller whose lease was superseded never locks the row at all). On
// any other error it rolls back to the savepoint too (tx is usable again
// unless its connection failed); the error wraps the driver's. The
// rollback is sent even if ctx has ended (the check's reply may have
// come in first), and gets 40ms after that: if its reply does not come
// in by then, pgx (by default) closes tx's connection, which ends tx and
// its locks. A lease whose job's row is gone (purged) is refused too. A
// nil tx is an error wrapping ErrInvalidOptions; tx must not be in a
// failed state. tx may be a nested pgx.Tx (itself a savepoint): rolling
// it back undoes the completion as a rollback of tx would.
//
// Each CompleteTx in tx takes a subtransaction: completing more than 64
// leases in one transaction overflows PostgreSQL's per-backend cache of
// subtransaction IDs, which makes other sessions' visibility checks
// consult pg_subtrans while tx is open (Complete, or Run's batched
// completion, suits large batches better).
//
// Once it returns nil, Close no longer waits for this lease, and Run's
// heartbeats and KeepAlive hold the lease for as long as tx is open:
// each heartbeat round proves it by finding tx still in progress on the
// database (tx holds the row with the completion written), so the
// handler's or KeepAlive's ctx is not canceled for want of a heartbeat;
// once tx has rolled back, they extend the lease again, or report it
// lost (a *LeaseLostError, LostExpired if its expiry passed meanwhile).
// No event is emitted: the Router cannot see tx commit (Run, which
// checks, emits completed once it has). tx must be READ COMMITTED
// (PostgreSQL's default): under REPEATABLE READ or SERIALIZABLE, a
// heartbeat committed since tx's snapshot makes it fail with a
// serialization error.
func (l *Lease[T]) CompleteTx(ctx context.Context, tx pgx.Tx) error {
	if l != nil && l.via != nil { // a Client handler's view: the queue's lease acts
		return l.via.CompleteTx(ctx, tx)
	}
	if tx == nil {
		return fmt.Errorf("%w: CompleteTx: nil tx", leaserouter.ErrInvalidOptions)
	}
	if l == nil || l.r == nil {
		return &leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease}
	}
	res, err := l.op(orBackground(ctx), tx, true, 0, "CompleteTx", l.r.st.endLease, l.endArgs(leaserouter.LostCompleted))
	if err == nil {
		l.mu.Lock()
		l.txDone, l.txXid, l.txAt = true, res.xid, *res.at
		l.mu.Unlock()
		l.r.release(l)
	}
	return err
}

// savepoint is the name of the savepoint op sets in a caller's
// transaction (a later one of the same name hides it until released, as
// PostgreSQL's savepoints do: a second CompleteTx in tx rolls back to its
// own).
const savepoint = "leaserouter_lease_op"

// endSavepoint ends op's savepoint in the caller's transaction q, given
// op's error so far and what writerOf read: on a refusal or an error it
// rolls back to the savepoint, letting go of the row lock the check took,
// even if ctx has ended (the check's reply may have come in before its
// end, leaving tx open with the row locked): then on a ctx of its own,
// lastGrace long. A best effort: if the connection failed, or the
// rollback's ctx ends before its reply (pgx then closes the connection,
// by default), the transaction is gone with its locks anyway; the
// refusal or the error is what the caller learns. On success it leaves the savepoint in
// place and sets res.xid to the full ID of the (sub)transaction that
// wrote the completion: the xmin of its row version with the epoch of
// the top-level transaction (pg_xact_status reports it in progress until
// the caller's transaction ends, aborted if a savepoint enclosing it is
// rolled back to). It returns op's error.
func (l *Lease[T]) endSavepoint(ctx context.Context, q querier, res *opResult, err error, top string, sub int64) error {
	if err == nil && res.ok {
		t, perr := strconv.ParseUint(top, 10, 64)
		if perr == nil {
			res.xid = fullXid(t, uint32(sub))
			return nil
		}
		err = perr
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), lastGrace)
		defer cancel()
	}
	// One simple-protocol message: after an error the transaction is
	// aborted, and the server would refuse to prepare RELEASE.
	_, _ = q.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint+"; RELEASE SAVEPOINT "+savepoint)
	return err
}

// fullXid is the full (epoch-qualified) ID of transaction ID sub, which
// was assigned at or after the full ID top: IDs increase, wrapping at
// 2^32 into the next epoch.
func fullXid(top uint64, sub uint32) uint64 {
	epoch := top >> 32
	if sub < uint32(top) {
		epoch++
	}
	return epoch<<32 | uint64(sub)
}

// writer is the full transaction ID of the (sub)transaction in which
// CompleteTx wrote l's completion, 0 if CompleteTx has not returned nil.
func (l *Lease[T]) writer() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.txXid
}

// pending reports, for each of ls (each completed by CompleteTx), whether
// the (sub)transaction that wrote its completion is still in progress on
// the database: then that transaction holds the job's row locked with the
// completion written, so the lease is as good as held until it ends (if
// it commits, the job is done; if it rolls back, the row is as before, and
// the next round extends the lease or finds it lost). Skipped by a
// heartbeat statement (SKIP LOCKED), such a row is proven here instead;
// after an error, none is (the round counts them as not looked at).
func (r *Router[T]) pending(ctx context.Context, q querier, ls []*Lease[T]) ([]bool, error) {
	xids := make([]string, len(ls))
	for i, l := range ls {
		xids[i] = strconv.FormatUint(l.writer(), 10)
	}
	rows, err := q.Query(ctx, r.st.txPending, args{"xids": xids})
	if err != nil {
		return nil, err
	}
	open, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err == nil && len(open) != len(ls) {
		err = fmt.Errorf("pgrouter: pending: %d answers for %d leases", len(open), len(ls))
	}
	return open, err
}

// txCompletedAt is the database's instant of the completion CompleteTx
// wrote (the row's updated_at once its transaction committed): the Time
// of the completed event Run emits for it.
func (l *Lease[T]) txCompletedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.txAt
}
