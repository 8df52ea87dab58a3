package pgrouter

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leaserouter/leaserouter"
)

// Statements on many leases of the queue at once, each lease acted on only
// if valid (the one invariant, as in leaseOp): $2 and $3 are the leases'
// job IDs and tokens.
const (
	// completeMany completes them; $4 is the Retention in microseconds.
	completeMany = `
UPDATE leaserouter_jobs j SET state = 3, ended = 'completed', owner = '', lease_expires_at = NULL,
	requeued = false, updated_at = clock_timestamp(), purge_at = clock_timestamp() + $4 * interval '1 microsecond'
FROM unnest($2::text[], $3::bigint[]) AS h(id, token)
WHERE j.queue = $1 AND j.id = h.id AND j.token = h.token AND j.state = 2 AND j.lease_expires_at > clock_timestamp()
RETURNING j.id, j.updated_at`

	// heartbeatMany extends them to the database's clock + $4
	// microseconds, never shortening one, and returns those extended.
	heartbeatMany = `
UPDATE leaserouter_jobs j SET updated_at = clock_timestamp(),
	lease_expires_at = greatest(j.lease_expires_at, clock_timestamp() + $4 * interval '1 microsecond')
FROM unnest($2::text[], $3::bigint[]) AS h(id, token)
WHERE j.queue = $1 AND j.id = h.id AND j.token = h.token AND j.state = 2 AND j.lease_expires_at > clock_timestamp()
RETURNING j.id, j.lease_expires_at, j.updated_at`

	// handBackMany ends leases Run granted ahead of their turn and never
	// started: pending again with the ready time (and requeued flag) they
	// had before, which a claim leaves as they were, and the lease not
	// counted as an attempt.
	handBackMany = `
UPDATE leaserouter_jobs j SET state = 0, attempt = j.attempt - 1, ended = 'released', owner = '',
	lease_expires_at = NULL, updated_at = clock_timestamp()
FROM unnest($2::text[], $3::bigint[]) AS h(id, token)
WHERE j.queue = $1 AND j.id = h.id AND j.token = h.token AND j.state = 2 AND j.lease_expires_at > clock_timestamp()
RETURNING j.id, j.updated_at`
)

// readInstants reads the (job ID, instant) rows a statement above
// returns.
func readInstants(rows pgx.Rows, err error) (map[string]time.Time, error) {
	if err != nil {
		return nil, err
	}
	at := map[string]time.Time{}
	for rows.Next() {
		var id string
		var t time.Time
		if err := rows.Scan(&id, &t); err != nil {
			rows.Close()
			return nil, err
		}
		at[id] = t
	}
	return at, rows.Err()
}

// completedMany counts and reports a completeMany of ls that completed
// those in done (by job ID, with the instant); the others were refused.
func (r *Router[T]) completedMany(ls []*Lease[T], done map[string]time.Time) {
	var evs []leaserouter.Event
	now := time.Now()
	for _, l := range ls {
		r.release(l)
		if r.ev == nil {
			continue
		}
		if at, ok := done[l.JobID]; ok {
			evs = append(evs, l.event(leaserouter.EventCompleted, at))
		} else {
			e := l.event(leaserouter.EventStaleRejected, now)
			e.Held, e.Err = 0, leaserouter.ErrLeaseLost
			evs = append(evs, e)
		}
	}
	r.mu.Lock()
	r.stats.StaleRejections += uint64(len(ls) - len(done))
	r.mu.Unlock()
	r.ev.add(evs...)
}

// leaseKeys are the job IDs and tokens of ls, as the statements take them.
func leaseKeys[T any](ls []*Lease[T]) ([]string, []int64) {
	ids, tokens := make([]string, len(ls)), make([]int64, len(ls))
	for i, l := range ls {
		ids[i], tokens[i] = l.JobID, int64(l.Token)
	}
	return ids, tokens
}

// completeAll completes ls in one statement (those still valid), as a
// stopping Run worker does with its finished jobs.
func (r *Router[T]) completeAll(ctx context.Context, ls []*Lease[T]) {
	ids, tokens := leaseKeys(ls)
	done, err := readInstants(r.db.Query(ctx, completeMany, r.opts.Queue, ids, tokens, r.keep))
	if err != nil {
		return // not completed: the leases expire and the jobs run again
	}
	r.completedMany(ls, done)
}

// handBack hands back ls (see handBackMany) and wakes the queue's
// waiters. On an error the leases stay until their expiry.
func (r *Router[T]) handBack(ctx context.Context, ls []*Lease[T]) {
	if len(ls) == 0 {
		return
	}
	ids, tokens := leaseKeys(ls)
	back, err := readInstants(r.db.Query(ctx, handBackMany, r.opts.Queue, ids, tokens))
	for _, l := range ls {
		r.release(l)
		if at, ok := back[l.JobID]; ok && r.ev != nil {
			r.ev.add(l.event(leaserouter.EventReleased, at))
		}
	}
	if err == nil {
		r.notify(ctx)
	}
}

// heartbeatAll extends ls in one statement and returns the new expiry of
// each lease extended, by job ID; the others are lost, or were ended by
// their holder meanwhile (the caller tells, and counts).
func (r *Router[T]) heartbeatAll(ctx context.Context, ls []*Lease[T]) (map[string]time.Time, error) {
	alive := make(map[string]time.Time, len(ls))
	if len(ls) == 0 {
		return alive, nil
	}
	ids, tokens := leaseKeys(ls)
	rows, err := r.db.Query(ctx, heartbeatMany, r.opts.Queue, ids, tokens, r.lease)
	if err != nil {
		return nil, err
	}
	var evs []leaserouter.Event
	for rows.Next() {
		var id string
		var exp, at time.Time
		if err := rows.Scan(&id, &exp, &at); err != nil {
			rows.Close()
			return nil, err
		}
		alive[id] = exp
		if r.ev != nil {
			evs = append(evs, leaserouter.Event{Kind: leaserouter.EventLeaseExtended, Time: at, JobID: id})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(evs) > 0 {
		byID := make(map[string]*Lease[T], len(ls))
		for _, l := range ls {
			byID[l.JobID] = l
		}
		for i := range evs {
			l := byID[evs[i].JobID]
			evs[i].WorkerID, evs[i].Token, evs[i].Attempt = l.WorkerID, l.Token, l.Attempt
		}
		r.ev.add(evs...)
	}
	return alive, nil
}

// lostErrors reads why each lease of ls, refused by a heartbeat, was
// lost, in one statement, as a refused operation would report it, and
// counts the refusals.
func (r *Router[T]) lostErrors(ctx context.Context, ls []*Lease[T]) []error {
	ids, _ := leaseKeys(ls)
	found := make(map[string]opResult, len(ls))
	rows, err := r.db.Query(ctx, `SELECT id, token, state, ended
		FROM leaserouter_jobs WHERE queue = $1 AND id = ANY($2)`, r.opts.Queue, ids)
	if err == nil {
		for rows.Next() {
			var id string
			var res opResult
			if rows.Scan(&id, &res.token, &res.was, &res.ended) == nil {
				found[id] = res
			}
		}
		rows.Close()
	}
	errs := make([]error, len(ls))
	now := time.Now()
	for i, l := range ls {
		r.release(l)
		e := l.lost(found[l.JobID])
		errs[i] = e
		stale := l.event(leaserouter.EventStaleRejected, now)
		stale.Held, stale.Err = 0, e
		r.ev.add(stale)
	}
	r.mu.Lock()
	r.stats.HeartbeatsRefused += uint64(len(ls))
	r.stats.StaleRejections += uint64(len(ls))
	r.mu.Unlock()
	return errs
}
