package pgrouter

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Bulk actions: RetryMany, CancelMany and DeleteMany, each one statement
// (jobs_retry, jobs_cancel, jobs_delete) that acts on a job only if it
// is still in one of the states the caller saw it in, run after
// jobs_settle in the same transaction (see bulkStatement). Retry, Cancel
// and Delete are the same statements with one ID and every state, so
// each action's rule is written once.

// everyState is every state's name: a single Retry, Cancel or Delete
// acts whatever the state the action applies to.
var everyState = stateNames(1<<(leaserouter.StateCanceled+1) - 1)

// RetryMany is Retry of each job of ids that is in one of states (empty:
// any) when the statement locks its row: a finished job (succeeded, dead
// or canceled) is made pending again at once with a fresh attempt budget,
// in its place in the enqueue order, as Retry does (EventRetried,
// Stats.Retried; one notification wakes the queue's waiters in every
// process). A job in none of states is left alone and counted in
// leaserouter.BulkResult.Moved (it moved since the caller saw it); an
// unfinished one in NotApplicable; an unknown or invalid ID, or a
// finished job past its Retention, in NotFound. An ID given twice counts
// once.
//
// More than leaserouter.MaxBulkIDs (10,000) IDs, or a state outside the
// State constants, is an error wrapping ErrInvalidOptions, without a
// round trip. It returns ErrClosed after Close, or an error wrapping the
// driver's, with a zero result; the call is one transaction, so after an
// error nothing changed, unless the outcome is unknown: when the
// connection fails after the commit was sent, the change may have been
// made (read the jobs back with Get or List to know).
//
// It settles what is due first, as Get does: a lease of one of the jobs
// found past its expiry when its row is locked is settled (expired,
// EventLeaseExpired, counted in Stats.Expirations, or dead) before the
// job is judged, even one the queue's settling round skipped because a
// lease operation locked it. One round trip, one transaction; it waits for
// the rows other transactions hold: a lease operation's briefly, but a
// CompleteTx's for the whole of its caller's transaction. It waits for
// them only in ID order, the order every statement of pgrouter that
// locks several jobs' rows takes them in, so a bulk call never deadlocks
// with another or with Run's completions. Safe for concurrent use.
func (r *Router[T]) RetryMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	ctx = orBackground(ctx)
	return r.bulk(ctx, "RetryMany", ids, states, r.retry)
}

// CancelMany is Cancel of each job of ids that is in one of states
// (empty: any) when the statement locks its row: a pending, scheduled or
// leased job is canceled as Cancel cancels it (a leased job's lease is
// lost at once: its holder's next operation is refused). A job in none
// of states is left alone and counted in leaserouter.BulkResult.Moved —
// a pending job a worker leased meanwhile keeps its lease when states is
// pending only —; a finished one in NotApplicable; an unknown or invalid
// ID, or a finished job past its Retention, in NotFound. Errors, round
// trips and locks are RetryMany's.
func (r *Router[T]) CancelMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	ctx = orBackground(ctx)
	return r.bulk(ctx, "CancelMany", ids, states, r.cancel)
}

// DeleteMany is Delete of each job of ids that is in one of states
// (empty: any) when the statement locks its row: a job not leased is
// deleted, its ID free to be enqueued again, as Delete does (EventPurged,
// Stats.Purged). A job in none of states is left alone and counted in
// leaserouter.BulkResult.Moved — a dead job someone retried meanwhile
// survives when states is dead only —; a leased one in NotApplicable;
// an unknown or invalid ID, or a finished job past its Retention, in
// NotFound. Errors, round trips and locks are RetryMany's.
func (r *Router[T]) DeleteMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	ctx = orBackground(ctx)
	return r.bulk(ctx, "DeleteMany", ids, states, r.delete)
}

// acted is what a bulk statement did to one job the queue knows: its
// state before, and whether the action changed it.
type acted struct {
	id, was string
	done    bool
	// delete only: the job's latest token (a leased job's lease's) and
	// its holder, for Delete's refusal of a leased job.
	token int64
	owner string
}

// bulk checks a bulk call's arguments and runs op (retry, cancel or
// delete) on its distinct valid IDs with the states' names, counting what
// it did.
func (r *Router[T]) bulk(ctx context.Context, call string, ids []string, states []leaserouter.State,
	op func(ctx context.Context, call string, ids, states []string) ([]acted, error)) (leaserouter.BulkResult, error) {
	var res leaserouter.BulkResult
	given, err := contract.BulkStates(leaserouter.ErrInvalidOptions, call, len(ids), states, leaserouter.StateCanceled+1)
	if err != nil {
		return res, err
	}
	ids, invalid := contract.BulkIDs(ids, leaserouter.ValidateID)
	if err := r.open(); err != nil {
		return res, err
	}
	if len(ids) == 0 {
		res.NotFound = invalid
		return res, nil
	}
	jobs, err := op(ctx, call, ids, stateNames(given))
	if err != nil {
		return res, err
	}
	res.NotFound = invalid + len(ids) - len(jobs)
	for _, j := range jobs {
		switch {
		case j.done:
			res.Done++
		case given&(1<<stateOf(j.was)) == 0:
			res.Moved++
		default:
			res.NotApplicable++
		}
	}
	return res, nil
}

// stateOf is the State whose label is name (a state column's text).
func stateOf(name string) leaserouter.State {
	if s, ok := stateNamed(name); ok {
		return s
	}
	return leaserouter.StateCanceled + 1
}

// bulkStatement runs sql (jobs_retry, jobs_cancel or jobs_delete) on
// ids with a, and scans each of its rows with scan; errors are wrapped
// for call. One round trip, one transaction (a batch): jobs_settle first
// locks the jobs' rows in ID order, waiting for those others hold, and
// settles the expired leases among them; then a settling round of the
// queue, which waits for no row (SKIP LOCKED); then sql, which finds its
// rows locked already. So the only waits are for rows in ID order, while
// holding only rows of lower IDs: no deadlock with another bulk call or
// with Run's completions (leases_end, the same order); and each job is
// judged as the expiry of its lease left it, even one the settling round
// skipped.
func (r *Router[T]) bulkStatement(ctx context.Context, call, sql string, ids []string, a args, scan func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	b.Queue(r.st.settleJobs, args{"queue": r.opts.Queue, "ids": ids, "retention_us": r.keep})
	r.queueSettle(b)
	b.Queue(sql, a)
	res := r.db.SendBatch(ctx, b)
	var settled settling
	err := settled.readExpired(res)
	if err == nil {
		var round settling
		round, err = readSettle(res)
		settled.expired, settled.dead = append(settled.expired, round.expired...), settled.dead+round.dead
		settled.ready = round.ready
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = res.Query(); err == nil {
			for rows.Next() && err == nil {
				err = scan(rows)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errWrap(call, err)
	}
	r.settled(ctx, settled)
	return nil
}

// retry runs jobs_retry on ids and states, and counts and emits what it
// retried.
func (r *Router[T]) retry(ctx context.Context, call string, ids, states []string) ([]acted, error) {
	var (
		out    []acted
		events []leaserouter.Event
	)
	err := r.bulkStatement(ctx, call, r.st.retryJobs, ids, args{"queue": r.opts.Queue, "ids": ids, "states": states, "channel": r.channel},
		func(rows pgx.Rows) error {
			var (
				j     acted
				token *int64
				at    *time.Time
				sent  int64
			)
			if err := rows.Scan(&j.id, &j.was, &token, &at, &sent); err != nil {
				return err
			}
			if j.done = at != nil; j.done {
				events = append(events, leaserouter.Event{Kind: leaserouter.EventRetried, Time: *at, JobID: j.id,
					Token: leaserouter.Token(*token)})
			}
			out = append(out, j)
			return nil
		})
	if err != nil {
		return nil, err
	}
	r.counted(&r.stats.Retried, events)
	return out, nil
}

// cancel runs jobs_cancel on ids and states, and emits what it canceled;
// a canceled lease of this Router's no longer holds up Close.
func (r *Router[T]) cancel(ctx context.Context, call string, ids, states []string) ([]acted, error) {
	var (
		out    []acted
		events []leaserouter.Event
		ended  = map[string]leaserouter.Token{}
	)
	err := r.bulkStatement(ctx, call, r.st.cancelJobs, ids, args{"queue": r.opts.Queue, "ids": ids, "states": states, "retention_us": r.keep},
		func(rows pgx.Rows) error {
			var (
				j       acted
				owner   string
				token   *int64
				attempt *int32
				at      *time.Time
				granted *time.Time
			)
			if err := rows.Scan(&j.id, &j.was, &owner, &token, &attempt, &at, &granted); err != nil {
				return err
			}
			if j.done = at != nil; j.done {
				// Token: the lease canceled, or for a job not leased its
				// latest lease's (0 if never leased), as the core's.
				e := leaserouter.Event{Kind: leaserouter.EventCanceled, Time: *at, JobID: j.id, Attempt: int(*attempt),
					Token: leaserouter.Token(*token)}
				if j.was == dbState(leaserouter.StateLeased) {
					e.WorkerID, e.Held = owner, heldFor(granted, *at)
					ended[j.id] = e.Token
				}
				events = append(events, e)
			}
			out = append(out, j)
			return nil
		})
	if err != nil {
		return nil, err
	}
	if len(ended) > 0 {
		r.releaseJobs(ended)
	}
	r.emit(events...)
	return out, nil
}

// delete runs jobs_delete on ids and states, and counts and emits what
// it deleted.
func (r *Router[T]) delete(ctx context.Context, call string, ids, states []string) ([]acted, error) {
	var (
		out    []acted
		events []leaserouter.Event
	)
	err := r.bulkStatement(ctx, call, r.st.deleteJobs, ids, args{"queue": r.opts.Queue, "ids": ids, "states": states},
		func(rows pgx.Rows) error {
			var (
				j       acted
				attempt *int32
				at      time.Time
			)
			if err := rows.Scan(&j.id, &j.was, &j.token, &j.owner, &j.done, &attempt, &at); err != nil {
				return err
			}
			if j.done {
				events = append(events, leaserouter.Event{Kind: leaserouter.EventPurged, Time: at, JobID: j.id,
					Token: leaserouter.Token(j.token), Attempt: int(*attempt)})
			}
			out = append(out, j)
			return nil
		})
	if err != nil {
		return nil, err
	}
	r.counted(&r.stats.Purged, events)
	return out, nil
}

// counted adds one per event to the Stats counter n (a field of
// r.stats, under r.mu) and emits the events: the end of an admin
// statement that acted on some jobs.
func (r *Router[T]) counted(n *uint64, events []leaserouter.Event) {
	r.mu.Lock()
	*n += uint64(len(events))
	r.mu.Unlock()
	r.emit(events...)
}
