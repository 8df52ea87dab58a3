package pgrouter

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// RunNow makes a scheduled job (one waiting for its run-at: a delay,
// WithRunAt, or a retry waiting out its backoff) pending at once, as if
// its run-at had come now (its ready time: the database's clock at the
// update), and wakes the queue's waiting Acquires in every process (a
// notification, sent if the change commits). Its attempt count,
// MaxAttempts, fencing token, LastError and checkpoint stay: a retry run
// early is the same next attempt it would have been at its run-at. It
// emits no event of its own; the lease that follows emits
// leaserouter.EventLeaseAcquired. It settles what is due first, as Get
// does (a job whose run-at has come is pending already). It returns an
// error wrapping leaserouter.ErrNotScheduled for a pending, leased or finished job
// (naming its state), ErrNotFound for an unknown id or a finished job
// past its Retention (for an id leaserouter.ValidateID refuses, ""
// included, one wrapping both ErrInvalidJob and ErrNotFound, without a
// round trip), ErrClosed after Close, or one wrapping the driver's; in
// each case nothing changed, unless the outcome is unknown (the
// connection failed after the commit was sent: Get tells). One round
// trip, one transaction; it waits for the job's row while another
// transaction holds it (a CompleteTx's: until its caller's transaction
// ends). Safe for concurrent use.
func (r *Router[T]) RunNow(ctx context.Context, id string) error {
	j, err := r.oneJob(ctx, "RunNow", id, r.runNow)
	if err == nil && !j.done {
		return fmt.Errorf("%w: %q is %s", leaserouter.ErrNotScheduled, id, j.was)
	}
	return err
}

// runNow runs jobs_run_now on ids (states is every state: the statement
// moves only scheduled jobs).
func (r *Router[T]) runNow(ctx context.Context, call string, ids, _ []string) ([]acted, error) {
	var out []acted
	err := r.bulkStatement(ctx, call, r.st.runNowJobs, ids, args{"queue": r.opts.Queue, "ids": ids, "channel": r.channel},
		func(rows pgx.Rows) error {
			var (
				j    acted
				at   *time.Time
				sent int64
			)
			if err := rows.Scan(&j.id, &j.was, &at, &sent); err != nil {
				return err
			}
			j.done = at != nil
			out = append(out, j)
			return nil
		})
	return out, err
}

// RunNow is Router.RunNow of the queue.
func (q *Queue) RunNow(ctx context.Context, id string) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.RunNow(ctx, id)
}
