package pgrouter

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leaserouter/leaserouter"
)

// Statements on many leases of the queue at once: $2 and $3 are the
// leases' job IDs and tokens. Each first locks the jobs' rows in ID
// order (the order every statement of pgrouter locks several rows in, so
// two of them never deadlock), then acts on a lease only if it is valid
// with the row locked (the one invariant, as in leaseOp).
const (
	// lockLeasesBlocking locks the rows of the leases' jobs, whatever
	// their token now, in ID order, and gives their latest version's
	// state, token, why the last lease ended and when (was, had, why,
	// at); lockLeasesSkipping skips those another transaction holds.
	lockLeasesBlocking = `
WITH l AS (
	SELECT j.queue, j.id, h.token AS held, j.state AS was, j.token AS had, j.ended AS why, j.updated_at AS at
	FROM leaserouter_jobs j
	JOIN unnest($2::text[], $3::bigint[]) AS h(id, token) ON j.id = h.id
	WHERE j.queue = $1 ORDER BY j.id FOR UPDATE OF j)`
	lockLeasesSkipping = `
WITH l AS (
	SELECT j.queue, j.id, h.token AS held FROM leaserouter_jobs j
	JOIN unnest($2::text[], $3::bigint[]) AS h(id, token) ON j.id = h.id
	WHERE j.queue = $1 ORDER BY j.id FOR UPDATE OF j SKIP LOCKED)`

	// completeMany completes the valid ones; $4 is the Retention in
	// microseconds. It returns each completed: ID, token, instant; a
	// lease completed already (by an earlier completeMany whose reply
	// was lost) is returned too, with the instant it was completed, so a
	// retry of an unknown outcome is not a refusal.
	completeMany = lockLeasesBlocking + `,
x AS (
	UPDATE leaserouter_jobs j SET state = 3, ended = 'completed', owner = '', lease_expires_at = NULL,
		requeued = false, updated_at = clock_timestamp(), purge_at = clock_timestamp() + $4 * interval '1 microsecond'
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND j.token = l.held AND j.state = 2 AND j.lease_expires_at > clock_timestamp()
	RETURNING j.id, j.token, j.updated_at)
SELECT id, token, updated_at FROM x
UNION ALL
SELECT id, held, at FROM l WHERE had = held AND was = 3 AND why = 'completed'`

	// heartbeatMany extends the valid ones to the database's clock + $4
	// microseconds, never shortening one, skipping rows another
	// transaction holds (a handler's own CompleteTx, say: a heartbeat
	// never waits). It returns each row it locked: ID, the lease's token,
	// and the new expiry and the instant if it extended it (NULL: lost).
	heartbeatMany = lockLeasesSkipping + `,
x AS (
	UPDATE leaserouter_jobs j SET updated_at = clock_timestamp(),
		lease_expires_at = greatest(j.lease_expires_at, clock_timestamp() + $4 * interval '1 microsecond')
	FROM l
	WHERE j.queue = l.queue AND j.id = l.id AND j.token = l.held AND j.state = 2 AND j.lease_expires_at > clock_timestamp()
	RETURNING j.id, j.token, j.lease_expires_at, j.updated_at)
SELECT l.id, l.held, x.lease_expires_at, x.updated_at FROM l LEFT JOIN x ON x.id = l.id AND x.token = l.held`

	// handBackMany ends leases Run granted ahead of their turn and never
	// started: pending again with the ready time (and requeued flag, and
	// so the reason its previous lease ended) they had before, which a
	// claim leaves as they were, and the lease not counted as an attempt.
	handBackMany = lockLeasesBlocking + `
UPDATE leaserouter_jobs j SET state = 0, attempt = j.attempt - 1, owner = '', lease_expires_at = NULL,
	ended = CASE WHEN j.requeued THEN 'expired' ELSE 'released' END, updated_at = clock_timestamp()
FROM l
WHERE j.queue = l.queue AND j.id = l.id AND j.token = l.held AND j.state = 2 AND j.lease_expires_at > clock_timestamp()
RETURNING j.id, j.token, j.updated_at`
)

// leaseKeys are the job IDs and tokens of ls, as the statements take them.
func leaseKeys[T any](ls []*Lease[T]) ([]string, []int64) {
	ids, tokens := make([]string, len(ls)), make([]int64, len(ls))
	for i, l := range ls {
		ids[i], tokens[i] = l.JobID, int64(l.Token)
	}
	return ids, tokens
}

// leaseKey names one lease: its job and token.
type leaseKey struct {
	id    string
	token leaserouter.Token
}

func keyOf[T any](l *Lease[T]) leaseKey { return leaseKey{l.JobID, l.Token} }

// readInstants reads the (job ID, token, instant) rows a statement above
// returns.
func readInstants(rows pgx.Rows, err error) (map[leaseKey]time.Time, error) {
	if err != nil {
		return nil, err
	}
	at := map[leaseKey]time.Time{}
	for rows.Next() {
		var k leaseKey
		var token int64
		var t time.Time
		if err := rows.Scan(&k.id, &token, &t); err != nil {
			rows.Close()
			return nil, err
		}
		k.token = leaserouter.Token(token)
		at[k] = t
	}
	return at, rows.Err()
}

// completedMany counts and reports a completeMany of ls that completed
// those in done (with the instant); the others were refused. The leases
// are released after their events are recorded.
func (r *Router[T]) completedMany(ls []*Lease[T], done map[leaseKey]time.Time) {
	var evs []leaserouter.Event
	now := time.Now()
	if r.ev != nil {
		for _, l := range ls {
			if at, ok := done[keyOf(l)]; ok {
				evs = append(evs, l.event(leaserouter.EventCompleted, at))
			} else {
				e := l.event(leaserouter.EventStaleRejected, now)
				e.Held, e.Err = 0, leaserouter.ErrLeaseLost
				evs = append(evs, e)
			}
		}
	}
	r.mu.Lock()
	r.stats.StaleRejections += uint64(len(ls) - len(done))
	r.mu.Unlock()
	r.ev.add(evs...)
	for _, l := range ls {
		r.release(l)
	}
}

// completeAll completes ls on q in one statement (those still valid), as
// Run does with finished jobs outside a claim, and reports whether the
// statement ran (if not, none was completed).
func (r *Router[T]) completeAll(ctx context.Context, q querier, ls []*Lease[T]) bool {
	ids, tokens := leaseKeys(ls)
	done, err := readInstants(q.Query(ctx, completeMany, r.opts.Queue, ids, tokens, r.keep))
	if err != nil {
		return false
	}
	r.completedMany(ls, done)
	return true
}

// handBack hands back ls on q (see handBackMany), wakes the queue's
// waiters (on q), and reports whether the statement ran. On an error the
// leases stay until their expiry, unless the caller tries again (a lease
// handed back already is left alone).
func (r *Router[T]) handBack(ctx context.Context, q querier, ls []*Lease[T]) bool {
	return r.handBackErr(ctx, q, ls) == nil
}

// handBackErr is handBack, returning the statement's error.
func (r *Router[T]) handBackErr(ctx context.Context, q querier, ls []*Lease[T]) error {
	if len(ls) == 0 {
		return nil
	}
	ids, tokens := leaseKeys(ls)
	back, err := readInstants(q.Query(ctx, handBackMany, r.opts.Queue, ids, tokens))
	for _, l := range ls {
		if at, ok := back[keyOf(l)]; ok && r.ev != nil {
			r.ev.add(l.event(leaserouter.EventReleased, at))
		}
		r.release(l)
	}
	if err == nil {
		r.notifyOn(ctx, q)
	}
	return err
}

// beatResult is what one heartbeat round found: the leases extended
// (with their new expiry, or the zero Time for a lease proven by its
// completion pending in the caller's open transaction: see pending) and
// those lost (with why); a lease in neither could not be looked at (its
// row held by another transaction).
type beatResult[T any] struct {
	alive map[*Lease[T]]time.Time
	lost  map[*Lease[T]]error
}

// heartbeatAll extends ls on q in one statement. A lease whose row it
// could not lock and whose row is gone or shows another lease is lost
// too. Refusals of leases still (per still) held are counted, reported
// and released; the others ended meanwhile by their holder.
func (r *Router[T]) heartbeatAll(ctx context.Context, q querier, ls []*Lease[T], still func(*Lease[T]) bool) (beatResult[T], error) {
	res := beatResult[T]{alive: map[*Lease[T]]time.Time{}, lost: map[*Lease[T]]error{}}
	if len(ls) == 0 {
		return res, nil
	}
	byKey := make(map[leaseKey]*Lease[T], len(ls))
	for _, l := range ls {
		byKey[keyOf(l)] = l
	}
	ids, tokens := leaseKeys(ls)
	rows, err := q.Query(ctx, heartbeatMany, r.opts.Queue, ids, tokens, r.lease)
	if err != nil {
		return res, err
	}
	seen := map[*Lease[T]]bool{}
	var evs []leaserouter.Event
	var refused []*Lease[T]
	for rows.Next() {
		var id string
		var token int64
		var exp, at *time.Time
		if err := rows.Scan(&id, &token, &exp, &at); err != nil {
			rows.Close()
			return res, err
		}
		l := byKey[leaseKey{id, leaserouter.Token(token)}]
		if l == nil {
			continue
		}
		seen[l] = true
		if exp == nil {
			refused = append(refused, l)
			continue
		}
		res.alive[l] = *exp
		if r.ev != nil {
			e := l.event(leaserouter.EventLeaseExtended, *at)
			e.Held = 0
			evs = append(evs, e)
		}
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	r.mu.Lock()
	r.stats.Heartbeats += uint64(len(res.alive))
	r.mu.Unlock()
	r.ev.add(evs...)
	var unseen, held []*Lease[T]
	for _, l := range ls {
		switch {
		case seen[l]:
		case l.writer() != 0:
			held = append(held, l)
		default:
			unseen = append(unseen, l)
		}
	}
	if len(held) > 0 {
		pending, err := r.pending(ctx, q, held)
		for i, l := range held {
			if err == nil && pending[i] {
				res.alive[l] = time.Time{} // held by the caller's transaction, the completion written
			} else {
				unseen = append(unseen, l)
			}
		}
	}
	found, ierr := r.inspect(ctx, q, append(refused, unseen...))
	if ierr != nil {
		refused, unseen = nil, nil // why they were refused is unknown: the next round tells
	}
	now := time.Now()
	for _, l := range append(refused, unseen...) {
		row, ok := found[l.JobID]
		if !seen[l] && ok && row.token != nil && leaserouter.Token(*row.token) == l.Token && *row.was == int16(leaserouter.StateLeased) {
			continue // held by another transaction, still this lease's: unknown until the next round
		}
		if !still(l) || endedByHolder(l, row, ok) {
			continue // ended by its holder during the round: not a refusal
		}
		e := l.lost(row)
		res.lost[l] = e
		stale := l.event(leaserouter.EventStaleRejected, now)
		stale.Held, stale.Err = 0, e
		r.ev.add(stale)
		r.release(l)
	}
	r.mu.Lock()
	r.stats.HeartbeatsRefused += uint64(len(res.lost))
	r.stats.StaleRejections += uint64(len(res.lost))
	r.mu.Unlock()
	return res, nil
}

// endedByHolder reports whether row (found) shows l ended by its own
// holder — completed, failed or released with l's token — rather than
// lost: a heartbeat round that raced the holder's own operation.
func endedByHolder[T any](l *Lease[T], row opResult, found bool) bool {
	if !found || row.token == nil || leaserouter.Token(*row.token) != l.Token || row.ended == nil {
		return false
	}
	switch leaserouter.LostReason(*row.ended) {
	case leaserouter.LostCompleted, leaserouter.LostFailed, leaserouter.LostReleased:
		return *row.was != int16(leaserouter.StateLeased)
	}
	return false
}

// inspect reads the rows of ls's jobs without locking them (current
// token, state, why the last lease ended), by job ID; a job whose row is
// gone is missing.
func (r *Router[T]) inspect(ctx context.Context, q querier, ls []*Lease[T]) (map[string]opResult, error) {
	found := map[string]opResult{}
	if len(ls) == 0 {
		return found, nil
	}
	ids, _ := leaseKeys(ls)
	rows, err := q.Query(ctx, `SELECT id, token, state, ended FROM leaserouter_jobs WHERE queue = $1 AND id = ANY($2)`, r.opts.Queue, ids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var res opResult
		if err := rows.Scan(&id, &res.token, &res.was, &res.ended); err != nil {
			rows.Close()
			return nil, err
		}
		found[id] = res
	}
	return found, rows.Err()
}
