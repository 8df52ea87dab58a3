package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// errRevoked is the Err of EventReleased for a lease Close revoked.
var errRevoked = errors.New("lease revoked by Close")

// lockRow locks a job's row (if it exists) until the end of the
// transaction, before leaseOp runs in the same one: so leaseOp's clock
// reading, its WHERE and its report all come after the lock is held,
// even when another transaction held the row without changing it (a
// SELECT ... FOR UPDATE), which would let a lone UPDATE go on with the
// clock it read before waiting.
const lockRow = `SELECT FROM leaserouter_jobs WHERE queue = $1 AND id = $2 FOR UPDATE`

// leaseOp is the one invariant's statement, run with the row locked: the
// UPDATE (its SET list spliced in, its own arguments from $4) acts only on
// a valid lease; the outer SELECT reports, in the same round trip,
// whether it acted, the state and expiry it left, and otherwise the row
// as it was (its latest version: the lock is held): current token, state,
// why its last lease ended.
const leaseOp = `
WITH upd AS (
	UPDATE leaserouter_jobs SET %s
	WHERE queue = $1 AND id = $2 AND %s
	RETURNING state, lease_expires_at, updated_at)
SELECT (SELECT count(*) FROM upd) = 1, (SELECT state FROM upd), (SELECT lease_expires_at FROM upd), (SELECT updated_at FROM upd),
	j.token, j.state, j.ended
FROM (SELECT) one LEFT JOIN leaserouter_jobs j ON j.queue = $1 AND j.id = $2`

// validLease is the one invariant, as leaseOp's WHERE states it for the
// lease whose token is $3 (with the row locked: see lockRow). A test that
// proves its checker catches a broken router swaps in a planted bug
// (export_test.go); nothing else changes it.
var validLease = `token = $3 AND state = 2 AND lease_expires_at > clock_timestamp()`

// opResult is what leaseOp reports.
type opResult struct {
	ok     bool
	state  *int16     // the state the update left
	expiry *time.Time // the expiry the update left
	at     *time.Time // the instant of the update
	token  *int64     // refused: the job's current token; nil if the row is gone
	was    *int16     // refused: its state
	ended  *string    // refused: why its latest lease ended
	xid    uint64     // in a caller's transaction, done: the full ID of the (sub)transaction that wrote it
}

// op runs lockRow and leaseOp with set on q, in one round trip and one
// transaction (q's own, or the batch's implicit one). A refusal returns a
// *LeaseLostError, reported and no longer held; a caller whose operation
// ended the lease reports it, then releases it (r.release).
//
// A non-zero id makes the operation resolvable (see outcome.go): the
// transaction first takes the advisory lock on id, and acts only if id
// is not marked abandoned; if its outcome is unknown, id is kept on l
// for the resolution.
//
// inTx: q is the caller's transaction (nothing else may run on the pool
// meanwhile: the caller may hold its last connection). The check runs
// under a savepoint: rolled back to on a refusal or an error (a second
// round trip), so the row lock it took is let go at once (a stale
// caller's open transaction never blocks the valid holder) and the
// transaction stays usable; left in place on success (see CompleteTx),
// with res.xid the (sub)transaction that wrote the change.
func (l *Lease[T]) op(ctx context.Context, q querier, inTx bool, id int64, call, set string, args ...any) (opResult, error) {
	var res opResult
	if l == nil || l.r == nil {
		return res, &leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease}
	}
	r := l.r
	b := &pgx.Batch{}
	if inTx {
		b.Queue("SAVEPOINT " + savepoint)
	}
	where := validLease
	args = append([]any{r.opts.Queue, l.JobID, int64(l.Token)}, args...)
	if id != 0 {
		b.Queue(opLock, id)
		args = append(args, id)
		where += fmt.Sprintf(notAbandoned, len(args))
	}
	l.queueLock(b, inTx)
	b.Queue(fmt.Sprintf(leaseOp, set, where), args...)
	var top string
	var sub int64
	if inTx {
		b.Queue(writerOf, r.opts.Queue, l.JobID)
	}
	br := q.SendBatch(ctx, b)
	var err error
	if inTx {
		_, err = br.Exec()
	}
	if err == nil && id != 0 {
		_, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&res.ok, &res.state, &res.expiry, &res.at, &res.token, &res.was, &res.ended)
	}
	if err == nil && inTx && res.ok { // refused: the row may be gone, and writerOf has nothing to say
		err = br.QueryRow().Scan(&top, &sub)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if inTx {
		err = l.endSavepoint(ctx, q, &res, err, top, sub)
	}
	if err != nil {
		if id != 0 && unknownOutcome(err) {
			l.unsure(id)
		}
		return res, fmt.Errorf("pgrouter: %s: %w", call, err)
	}
	if res.ok {
		return res, nil // the caller reports, then releases a lease it ended
	}
	r.mu.Lock()
	r.stats.StaleRejections++
	if call == "Heartbeat" {
		r.stats.HeartbeatsRefused++
	}
	r.mu.Unlock()
	e := l.lost(res)
	stale := l.event(leaserouter.EventStaleRejected, time.Now())
	stale.Held, stale.Err = 0, e
	r.ev.add(stale) // before the release: Close delivers every event of a lease it waited for
	r.release(l)    // refused: the lease is lost, nothing left to hold
	if e.Reason == leaserouter.LostExpired && !inTx {
		r.settle(ctx) // found expired: settle it now, as the core's refusal does
	}
	return res, e
}

// lost builds the refusal's error from the row as the refusing statement
// found it, with its lock held.
func (l *Lease[T]) lost(res opResult) *leaserouter.LeaseLostError {
	e := &leaserouter.LeaseLostError{JobID: l.JobID, Token: l.Token, Reason: "unknown"}
	switch {
	case res.token == nil: // the job's row is gone (purged)
	case leaserouter.Token(*res.token) != l.Token:
		e.Current, e.Reason = leaserouter.Token(*res.token), leaserouter.LostSuperseded
	case *res.was == int16(leaserouter.StateLeased):
		// Still leased with this token, yet refused: its expiry had
		// passed at the moment the row was locked.
		e.Current, e.Reason = l.Token, leaserouter.LostExpired
	default:
		e.Current = l.Token
		if *res.ended != "" {
			e.Reason = leaserouter.LostReason(*res.ended)
		}
	}
	return e
}

// errExhausted is the Err of EventDead for a job whose last lease was
// released (or revoked).
var errExhausted = errors.New("attempts exhausted")

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
