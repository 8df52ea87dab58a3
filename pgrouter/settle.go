package pgrouter

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// settleExpired settles the queue's expired leases at the database's
// clock, at most $2, oldest first: each job is pending again with its
// expiry instant as ready time, or dead when its attempts are exhausted
// (purged Retention, $3 microseconds, later). Rows another transaction
// holds are skipped (their holder is acting on them). It returns each
// job settled: ID, token, attempt, new state, expiry, holder.
const settleExpired = `
UPDATE leaserouter_jobs j SET
	state = CASE WHEN j.attempt >= j.max_attempts THEN 4 ELSE 0 END,
	ready_at = j.lease_expires_at, requeued = j.attempt < j.max_attempts,
	ended = 'expired', last_error = 'lease expired', owner = '',
	updated_at = j.lease_expires_at, lease_expires_at = NULL,
	purge_at = CASE WHEN j.attempt >= j.max_attempts THEN j.lease_expires_at + $3 * interval '1 microsecond' END
FROM (SELECT queue, id, owner FROM leaserouter_jobs
	WHERE queue = $1 AND state = 2 AND lease_expires_at <= (SELECT clock_timestamp())
	ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
WHERE j.queue = d.queue AND j.id = d.id
RETURNING j.id, j.token, j.attempt, j.state, j.ready_at, d.owner`

// settleScheduled makes the queue's scheduled jobs whose run-at has come
// pending, at most $2, with their run-at as ready time, and returns how
// many.
const settleScheduled = `
WITH sch AS (
	UPDATE leaserouter_jobs j SET state = 0, updated_at = j.ready_at
	FROM (SELECT queue, id FROM leaserouter_jobs
		WHERE queue = $1 AND state = 1 AND ready_at <= (SELECT clock_timestamp())
		ORDER BY ready_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
	WHERE j.queue = d.queue AND j.id = d.id
	RETURNING 1)
SELECT count(*) FROM sch`

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
	b.Queue(settleExpired, r.opts.Queue, settleLimit, r.keep)
	b.Queue(settleScheduled, r.opts.Queue, settleLimit)
}

// readSettle reads the results of queueSettle's statements.
func readSettle(res pgx.BatchResults) (settling, error) {
	var s settling
	rows, err := res.Query()
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var (
			id, owner string
			token     int64
			attempt   int32
			state     int16
			expiry    time.Time
		)
		if err := rows.Scan(&id, &token, &attempt, &state, &expiry, &owner); err != nil {
			rows.Close()
			return s, err
		}
		e := leaserouter.Event{Kind: leaserouter.EventLeaseExpired, Time: expiry, JobID: id, WorkerID: owner,
			Token: leaserouter.Token(token), Attempt: int(attempt)}
		s.expired = append(s.expired, e)
		if leaserouter.State(state) == leaserouter.StateFailed {
			e.Kind, e.Err = leaserouter.EventDead, errLeaseExpired
			s.expired = append(s.expired, e)
			s.dead++
		}
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	err = res.QueryRow().Scan(&s.ready)
	return s, err
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
	r.ev.add(s.expired...)
	if len(s.expired) > s.dead || s.ready > 0 {
		r.notifyOn(ctx, q)
	}
}

// purgeDue deletes up to $2 finished jobs of the queue past their
// retention, oldest first, skipping rows other transactions hold, and
// returns each: ID, token, attempt, purge time.
const purgeDue = `
WITH d AS (
	DELETE FROM leaserouter_jobs j
	USING (SELECT queue, id FROM leaserouter_jobs
		WHERE queue = $1 AND state >= 3 AND purge_at <= clock_timestamp()
		ORDER BY purge_at LIMIT $2 FOR UPDATE SKIP LOCKED) p
	WHERE j.queue = p.queue AND j.id = p.id
	RETURNING j.id, j.token, j.attempt, j.purge_at)
SELECT id, token, attempt, purge_at FROM d`

// maintain is the Router's maintenance loop, until ctx is done: every
// PollInterval it settles what is due (expired leases, scheduled jobs
// reaching their run-at; jobs made ready wake the queue's waiters in
// every process) and deletes finished jobs past their retention, in
// batches of settleLimit rows with SKIP LOCKED, so any number of
// processes may run it at once. A full batch is followed by the next at
// once. Errors (the database unreachable) wait for the next round.
// About once a minute it also deletes the abandoned claim marks older
// than abandonedKeep (see outcome.go).
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
		if time.Since(marksPurged) >= time.Minute {
			if _, err := r.db.Exec(ctx, purgeAbandoned, abandonedKeep.Microseconds()); err == nil {
				marksPurged = time.Now()
			}
		}
	}
}

// purge runs purgeDue once, counts and reports what it deleted.
func (r *Router[T]) purge(ctx context.Context) (int, error) {
	rows, err := r.db.Query(ctx, purgeDue, r.opts.Queue, settleLimit)
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
	r.ev.add(evs...)
	return n, nil
}

// abandonedKeep is how long abandoned claim marks are kept: longer than
// any claim can be held in the network or a stalled server.
const abandonedKeep = 24 * time.Hour

// purgeAbandoned deletes abandoned claim marks older than $1
// microseconds.
const purgeAbandoned = `DELETE FROM leaserouter_abandoned_claims WHERE at < clock_timestamp() - $1 * interval '1 microsecond'`
