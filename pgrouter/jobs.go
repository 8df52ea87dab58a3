package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// getJob reads one job, unless it is finished and past its retention (as
// good as purged).
const getJob = `
SELECT id, payload, state, priority, attempt, max_attempts, token, owner, lease_expires_at, ready_at,
	progress, last_error, created_at, updated_at
FROM leaserouter_jobs
WHERE queue = $1 AND id = $2 AND NOT (state >= 3 AND purge_at <= clock_timestamp())`

// Get returns a snapshot of job id, after settling what is due in the
// queue (so a lease past its expiry shows as the expiry left it), and
// whether the queue knows it: a finished job past its Retention is not
// known. Times are the database's. It works after Close. An id
// leaserouter.ValidateID refuses ("" included) is not found, at once,
// without a round trip. Errors wrap the driver's.
func (r *Router[T]) Get(ctx context.Context, id string) (leaserouter.Job[T], bool, error) {
	ctx = orBackground(ctx)
	var j leaserouter.Job[T]
	if leaserouter.ValidateID(id) != nil {
		return j, false, nil
	}
	b := &pgx.Batch{}
	r.queueSettle(b)
	b.Queue(getJob, r.opts.Queue, id)
	res := r.db.SendBatch(ctx, b)
	settled, err := readSettle(res)
	if err != nil {
		res.Close()
		return j, false, errWrap("Get", err)
	}
	var (
		payload      []byte
		state        int16
		prio         int64
		att, maxAtt  int32
		token        int64
		expiry       *time.Time
		readyAt      time.Time
		lastErr      string
		progress     []byte
		owner        string
		created, upd time.Time
	)
	err = res.QueryRow().Scan(&j.ID, &payload, &state, &prio, &att, &maxAtt, &token, &owner, &expiry, &readyAt,
		&progress, &lastErr, &created, &upd)
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
	if j.Payload, err = decode[T](id, payload); err != nil {
		return j, false, err
	}
	j.State, j.Priority, j.Attempt, j.MaxAttempts = leaserouter.State(state), int(prio), int(att), int(maxAtt)
	j.Token, j.Owner, j.Progress, j.LastError = leaserouter.Token(token), owner, progress, lastErr
	j.CreatedAt, j.UpdatedAt = created, upd
	switch j.State {
	case leaserouter.StateLeased:
		j.LeaseExpiry = *expiry
	case leaserouter.StateScheduled:
		j.RunAt = readyAt
	}
	return j, true, nil
}

// Cancel makes a pending, scheduled or leased job StateCanceled, in one
// statement; a leased job's lease is lost at once (its holder's
// operations are refused with reason LostCanceled). Canceling a finished
// job changes nothing and returns nil. It returns an error wrapping
// ErrNotFound for an unknown id (for an id leaserouter.ValidateID
// refuses, "" included, the core's error: one wrapping both
// ErrInvalidJob, naming the problem, and ErrNotFound, without a round
// trip), ErrClosed after Close, or one wrapping the driver's.
func (r *Router[T]) Cancel(ctx context.Context, id string) error {
	ctx = orBackground(ctx)
	if err := leaserouter.ValidateID(id); err != nil {
		return fmt.Errorf("%w: %w", err, leaserouter.ErrNotFound)
	}
	if err := r.open(); err != nil {
		return err
	}
	var (
		found   bool
		token   *int64
		attempt *int32
		at      *time.Time
		owner   *string
		leased  *bool
		granted *time.Time
	)
	b := &pgx.Batch{}
	r.queueSettle(b) // a lease past its expiry is settled first, as the core does
	b.Queue(`
		WITH was AS (SELECT state, owner FROM leaserouter_jobs WHERE queue = $1 AND id = $2 FOR UPDATE),
		upd AS (
			UPDATE leaserouter_jobs j SET state = 5, owner = '', lease_expires_at = NULL,
				ended = CASE WHEN j.state = 2 THEN 'canceled' ELSE j.ended END,
				updated_at = clock_timestamp(), purge_at = clock_timestamp() + $3 * interval '1 microsecond'
			FROM was
			WHERE j.queue = $1 AND j.id = $2 AND j.state < 3
			RETURNING j.token, j.attempt, j.updated_at, was.owner, was.state = 2 AS leased, j.leased_at)
		SELECT EXISTS (SELECT FROM upd) OR EXISTS (SELECT FROM leaserouter_jobs
				WHERE queue = $1 AND id = $2 AND NOT (state >= 3 AND purge_at <= clock_timestamp())),
			(SELECT token FROM upd), (SELECT attempt FROM upd), (SELECT updated_at FROM upd),
			(SELECT owner FROM upd), (SELECT leased FROM upd), (SELECT leased_at FROM upd)`,
		r.opts.Queue, id, r.keep)
	res := r.db.SendBatch(ctx, b)
	settled, err := readSettle(res)
	if err == nil {
		err = res.QueryRow().Scan(&found, &token, &attempt, &at, &owner, &leased, &granted)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errWrap("Cancel", err)
	}
	r.settled(ctx, settled)
	if !found {
		return fmt.Errorf("%w: %q", leaserouter.ErrNotFound, id)
	}
	if at != nil { // canceled now, not finished before
		e := leaserouter.Event{Kind: leaserouter.EventCanceled, Time: *at, JobID: id, Attempt: int(*attempt)}
		if *leased {
			e.WorkerID, e.Token, e.Held = *owner, leaserouter.Token(*token), heldUntil(granted, *at)
			r.releaseJob(id, e.Token) // a lease of this Router's: Close no longer waits for it
		}
		r.ev.add(e)
	}
	return nil
}

// Stats returns the queue's jobs by state, counted in the table (finished
// ones while retained), and this Router's totals since New (other
// processes' calls are not in them). It works after Close. Errors wrap
// the driver's.
func (r *Router[T]) Stats(ctx context.Context) (leaserouter.Stats, error) {
	ctx = orBackground(ctx)
	rows, err := r.db.Query(ctx, `SELECT state, count(*) FROM leaserouter_jobs
		WHERE queue = $1 AND NOT (state >= 3 AND purge_at <= clock_timestamp()) GROUP BY state`, r.opts.Queue)
	if err != nil {
		return leaserouter.Stats{}, errWrap("Stats", err)
	}
	var by [6]int
	for rows.Next() {
		var st int16
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			rows.Close()
			return leaserouter.Stats{}, errWrap("Stats", err)
		}
		if st >= 0 && int(st) < len(by) {
			by[st] = int(n)
		}
	}
	if err := rows.Err(); err != nil {
		return leaserouter.Stats{}, errWrap("Stats", err)
	}
	r.mu.Lock()
	s := r.stats
	r.mu.Unlock()
	s.Pending, s.Scheduled, s.Leased, s.Succeeded, s.Failed, s.Canceled = by[0], by[1], by[2], by[3], by[4], by[5]
	return s, nil
}
