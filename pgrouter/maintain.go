package pgrouter

import (
	"context"
	"time"
)

// purgeDue deletes up to $2 finished jobs of the queue past their
// retention, oldest first, skipping rows other transactions hold, and
// returns how many it deleted.
const purgeDue = `
WITH d AS (
	DELETE FROM leaserouter_jobs j
	USING (SELECT queue, id FROM leaserouter_jobs
		WHERE queue = $1 AND state >= 3 AND purge_at <= clock_timestamp()
		ORDER BY purge_at LIMIT $2 FOR UPDATE SKIP LOCKED) p
	WHERE j.queue = p.queue AND j.id = p.id
	RETURNING 1)
SELECT count(*) FROM d`

// maintain is the Router's maintenance loop, until ctx is done: every
// PollInterval it settles what is due (expired leases, scheduled jobs
// reaching their run-at; jobs made ready wake the queue's waiters in
// every process) and deletes finished jobs past their retention, in
// batches of settleLimit rows with SKIP LOCKED, so any number of
// processes may run it at once. A full batch is followed by the next at
// once. Errors (the database unreachable) wait for the next round.
func (r *Router[T]) maintain(ctx context.Context) {
	t := time.NewTicker(r.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			r.settle(ctx)
			var n int64
			if err := r.db.QueryRow(ctx, purgeDue, r.opts.Queue, settleLimit).Scan(&n); err != nil {
				break
			}
			r.mu.Lock()
			r.stats.Purged += uint64(n)
			r.mu.Unlock()
			if n < settleLimit {
				break
			}
		}
	}
}
