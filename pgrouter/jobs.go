package pgrouter

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// Get returns a snapshot of job id, after settling what is due in the
// queue (so a lease past its expiry shows as the expiry left it), and
// whether the queue knows it: a finished job past its Retention is not
// known. Times are the database's. It works after Close. An id
// leaserouter.ValidateID refuses ("" included) is not found, at once,
// without a round trip. Errors wrap the driver's.
func (r *Router[T]) Get(ctx context.Context, id string) (leaserouter.Job[T], bool, error) {
	return get[T](ctx, r, id)
}

// GetJSON is Get with the payload as JSON (json.RawMessage), the bytes
// of the payload column as they are, never decoded into T: the console's
// job page reads a Router of any T this way (console.Source), a job of
// any kind with its payload, and a job whose payload would not decode
// into T is shown all the same. It
// settles, costs and fails as Get does.
func (r *Router[T]) GetJSON(ctx context.Context, id string) (leaserouter.Job[json.RawMessage], bool, error) {
	return get[json.RawMessage](ctx, r, id)
}

// get is Get with a payload of type P (T, or json.RawMessage: the column
// as it is, see decode).
func get[P, T any](ctx context.Context, r *Router[T], id string) (leaserouter.Job[P], bool, error) {
	ctx = orBackground(ctx)
	var j leaserouter.Job[P]
	if leaserouter.ValidateID(id) != nil {
		return j, false, nil
	}
	b := &pgx.Batch{}
	r.queueSettle(b)
	b.Queue(r.st.getJob, args{"queue": r.opts.Queue, "id": id})
	res := r.db.SendBatch(ctx, b)
	settled, err := readSettle(res)
	if err != nil {
		res.Close()
		return j, false, errWrap("Get", err)
	}
	var jr jobRow
	err = res.QueryRow().Scan(jr.fields()...)
	// The batch's connection back to the pool (and its implicit
	// transaction committed) before settled's notify asks for another.
	if cerr := res.Close(); err == nil || errors.Is(err, pgx.ErrNoRows) {
		if cerr != nil {
			return j, false, errWrap("Get", cerr)
		}
		r.settled(ctx, settled)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return j, false, nil
	}
	if err != nil {
		return j, false, errWrap("Get", err)
	}
	j, err = jobOf[P](&jr, r.opts.kinds)
	return j, err == nil, err
}

// jobRow is a job's row as job_get and jobs_list read it.
type jobRow struct {
	id, state, owner, lastErr, kind string
	payload, progress, meta, errs   []byte // errs: the errors column, NULL (nil) for none or not read
	prio, token, timeoutUS          int64
	att, maxAtt                     int32
	expiry, leasedAt                *time.Time // leasedAt: NULL unless leased (or granted before schema version 4)
	readyAt, created, upd           time.Time
}

// fields are the scan targets of jr, in the statements' column order.
func (jr *jobRow) fields() []any {
	return []any{&jr.id, &jr.payload, &jr.state, &jr.prio, &jr.att, &jr.maxAtt, &jr.token, &jr.owner, &jr.expiry,
		&jr.readyAt, &jr.progress, &jr.lastErr, &jr.created, &jr.upd, &jr.timeoutUS, &jr.kind, &jr.meta, &jr.leasedAt, &jr.errs}
}

// jobOf is the snapshot of jr, its payload decoded if its kind is one of
// kinds (the Router's) or T is json.RawMessage (which takes any kind's):
// a job of another kind, whose payload is another type, keeps a zero
// Payload, and its Kind tells. A NULL payload (a statement that did not
// read it: List with OmitPayload, Leases; the column itself is NOT NULL)
// leaves Payload zero; a NULL metadata, Metadata nil; NULL errors
// (none, or not read), Errors nil.
func jobOf[T any](jr *jobRow, kinds []string) (leaserouter.Job[T], error) {
	j := leaserouter.Job[T]{ID: jr.id, Kind: jr.kind}
	if jr.payload != nil && (slices.Contains(kinds, jr.kind) || isRaw[T]()) {
		var err error
		if j.Payload, err = decode[T](jr.id, jr.payload); err != nil {
			return j, err
		}
	}
	if jr.meta != nil {
		var err error
		if j.Metadata, err = decodeMetadata(jr.id, jr.meta); err != nil {
			return j, err
		}
	}
	if jr.errs != nil {
		var err error
		if j.Errors, err = decodeErrors(jr.id, jr.errs); err != nil {
			return j, err
		}
	}
	j.State, _ = stateNamed(jr.state)
	j.Priority, j.Attempt, j.MaxAttempts = int(jr.prio), int(jr.att), int(jr.maxAtt)
	j.Token, j.Owner, j.Progress, j.LastError = leaserouter.Token(jr.token), jr.owner, jr.progress, jr.lastErr
	j.CreatedAt, j.UpdatedAt = jr.created, jr.upd
	j.Timeout = microsDuration(jr.timeoutUS)
	switch j.State {
	case leaserouter.StateLeased:
		if jr.expiry != nil { // NULL only in a row written by hand: a zero expiry, not a panic
			j.LeaseExpiry = *jr.expiry
		}
		if jr.leasedAt != nil {
			j.LeasedAt = *jr.leasedAt
		}
	case leaserouter.StateScheduled:
		j.RunAt = jr.readyAt
	}
	return j, nil
}

// Cancel makes a pending, scheduled or leased job StateCanceled; a
// leased job's lease is lost at once (its holder's operations are refused
// with reason LostCanceled). It settles what is due first, as Get does: a
// lease past its expiry is settled before the job is judged (expired,
// or dead if its attempts are used up: then there is nothing to cancel).
// Canceling a finished job changes nothing and returns nil. It returns an
// error wrapping ErrNotFound for an unknown id (for an id
// leaserouter.ValidateID refuses, "" included, the core's error: one
// wrapping both ErrInvalidJob, naming the problem, and ErrNotFound,
// without a round trip), ErrClosed after Close, or one wrapping the
// driver's; in each case nothing changed, unless the outcome is unknown
// (the connection failed after the commit was sent: Get tells). One
// round trip, one transaction (CancelMany's, for one job); it waits for
// the job's row while another transaction holds it (a CompleteTx's:
// until its caller's transaction ends). Safe for concurrent use.
func (r *Router[T]) Cancel(ctx context.Context, id string) error {
	_, err := r.oneJob(ctx, "Cancel", id, r.cancel)
	return err
}
