package pgrouter

import (
	"context"
	"time"

	"github.com/leaserouter/leaserouter"
)

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
// than abandonedKeep (see resolve.go).
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
