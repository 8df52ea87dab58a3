package pgrouter

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// settleLimit bounds the items of each kind one settling settles.
const settleLimit = 1000

// settling is what one settling round found: the leases it expired and
// how many scheduled jobs it made ready.
type settling struct {
	expired []leaserouter.Event // EventLeaseExpired, each followed by EventDead when the job died
	dead    int
	ready   int64
}

// queueSettle adds a settling round's two statements to b.
func (r *Router[T]) queueSettle(b *pgx.Batch) {
	b.Queue(r.st.settleExpired, args{"queue": r.opts.Queue, "limit": settleLimit, "retention_us": r.keep})
	b.Queue(r.st.settleScheduled, args{"queue": r.opts.Queue, "limit": settleLimit})
}

// readSettle reads the results of queueSettle's statements.
func readSettle(res pgx.BatchResults) (settling, error) {
	var s settling
	if err := s.readExpired(res); err != nil {
		return s, err
	}
	err := res.QueryRow().Scan(&s.ready)
	return s, err
}

// readExpired adds to s the leases the next statement of res expired: a
// statement returning settle_expired.sql's columns (that one, or
// jobs_settle.sql).
func (s *settling) readExpired(res pgx.BatchResults) error {
	rows, err := res.Query()
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			id, owner string
			token     int64
			attempt   int32
			state     string
			expiry    time.Time
			granted   *time.Time
		)
		if err := rows.Scan(&id, &token, &attempt, &state, &expiry, &owner, &granted); err != nil {
			rows.Close()
			return err
		}
		e := leaserouter.Event{Kind: leaserouter.EventLeaseExpired, Time: expiry, JobID: id, WorkerID: owner,
			Token: leaserouter.Token(token), Attempt: int(attempt), Held: heldFor(granted, expiry)}
		s.expired = append(s.expired, e)
		if isState(&state, leaserouter.StateDead) {
			e.Kind, e.Err, e.Held = leaserouter.EventDead, errLeaseExpired, 0
			s.expired = append(s.expired, e)
			s.dead++
		}
	}
	return rows.Err()
}

// errLeaseExpired is the Err of EventDead for a job whose last lease
// expired.
var errLeaseExpired = errors.New("lease expired")

// settle runs a settling round on its own.
func (r *Router[T]) settle(ctx context.Context) {
	b := &pgx.Batch{}
	r.queueSettle(b)
	res := r.db.SendBatch(ctx, b)
	s, err := readSettle(res)
	if cerr := res.Close(); err == nil && cerr == nil {
		r.settled(ctx, s)
	}
}

// settled counts and reports what a settling round settled, and wakes the
// queue's waiters in every process if jobs became ready.
func (r *Router[T]) settled(ctx context.Context, s settling) { r.settledOn(ctx, r.db, s) }

// settledOn is settled, notifying on q.
func (r *Router[T]) settledOn(ctx context.Context, q querier, s settling) {
	if len(s.expired) == 0 && s.ready == 0 {
		return
	}
	r.mu.Lock()
	r.stats.Expirations += uint64(len(s.expired) - s.dead)
	r.stats.Dead += uint64(s.dead)
	r.mu.Unlock()
	r.emit(s.expired...)
	if len(s.expired) > s.dead || s.ready > 0 {
		r.notifyOn(ctx, q)
	}
}

// maintain is the Router's maintenance loop, until ctx is done: every
// PollInterval it settles what is due (expired leases, scheduled jobs
// reaching their run-at; jobs made ready wake the queue's waiters in
// every process) and deletes finished jobs past their retention, in
// batches of settleLimit rows with SKIP LOCKED, so any number of
// processes may run it at once; a purge that finds another process's
// purge of the queue in flight deletes nothing and ends the round (see
// purge.sql: one purge of a queue at a time). A full batch is followed by
// the next at once. Errors (the database unreachable) wait for the next
// round.
// About once a minute it also deletes the abandoned claim marks older
// than abandonedKeep (see outcome.go), the records of completions that
// deleted their rows older than endedKeep (see endedBy), and the records
// of the queue's periodic ticks older than Retention (periodic_prune.sql).
func (r *Router[T]) maintain(ctx context.Context) {
	t := time.NewTicker(r.opts.PollInterval)
	defer t.Stop()
	var marksPurged time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			r.settle(ctx)
			n, err := r.purge(ctx)
			if err != nil || n < settleLimit {
				break
			}
		}
		_ = r.flushHistory(ctx) // what could not be added waits for the next round
		if time.Since(marksPurged) >= time.Minute {
			_, err := r.db.Exec(ctx, r.st.purgeAbandoned, args{"keep_us": abandonedKeep.Microseconds(),
				"ended_keep_us": endedKeep.Microseconds()})
			if err == nil {
				_, err = r.db.Exec(ctx, r.st.periodicPrune, args{"queue": r.opts.Queue, "retention_us": r.opts.Retention.Microseconds()})
			}
			if err == nil {
				marksPurged = time.Now()
			}
		}
	}
}

// purge runs purgeDue once, counts and reports what it deleted.
func (r *Router[T]) purge(ctx context.Context) (int, error) {
	rows, err := r.db.Query(ctx, r.st.purgeDue, args{"queue": r.opts.Queue, "limit": settleLimit})
	if err != nil {
		return 0, err
	}
	var evs []leaserouter.Event
	n := 0
	for rows.Next() {
		var e leaserouter.Event
		var token int64
		var attempt int32
		if err := rows.Scan(&e.JobID, &token, &attempt, &e.Time); err != nil {
			rows.Close()
			return n, err
		}
		n++
		if r.ev != nil {
			e.Kind, e.Token, e.Attempt = leaserouter.EventPurged, leaserouter.Token(token), int(attempt)
			evs = append(evs, e)
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	r.mu.Lock()
	r.stats.Purged += uint64(n)
	r.mu.Unlock()
	r.emit(evs...)
	return n, nil
}

// abandonedKeep is how long abandoned claim marks are kept: longer than
// any claim can be delayed in the network or a stalled server.
const abandonedKeep = 24 * time.Hour

// endedKeep is how long the records of completions that deleted their
// jobs' rows (Retention < 0) are kept for a retry whose earlier
// statement's reply was lost: leaserouter.DefaultRetention, as long as a
// completed job stays by default. Their size grows with the rate of
// completions (about 20 bytes a job with Run's batches of 64, 140 with
// batches of one), so not a day as the marks. A retry later
// than that finds neither row nor record and reports the lease refused,
// as a retry after the purge did before completions deleted rows.
const endedKeep = leaserouter.DefaultRetention
