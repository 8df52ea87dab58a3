package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// The lease statements' round trip, the Go side of every lease
// operation: their arguments (endArgs, endManyArgs), op, which sends a
// single lease's statement behind its row lock (queueLock) in one round
// trip, and the reading of their replies (opResult, readEnded,
// readInstants, inspect), from which lost says why a lease was refused.
// The operations themselves are in lease.go, snooze.go, completetx.go,
// keepalive.go and claim.go (Run's completions ride its next claim); an
// unknown outcome is resolved in outcome.go.
//
// The state machine is not here: it is SQL, written once (migration
// 0003): leaserouter_lease_valid is the one invariant,
// leaserouter_end_lease says how a lease ends and where its job goes
// (completed, failed, released, revoked, expired, and snoozed since
// migration 0009). Every end of a single lease by its holder goes
// through sql/lease_end.sql, of many (Run's completions, Close's
// revocation) through sql/leases_end.sql, both calling those two
// functions; a heartbeat through lease_heartbeat.sql or
// leases_heartbeat.sql. The single forms report, in the same round trip,
// whether they acted and, when not, the row as they found it.

// errRevoked is the Err of EventReleased for a lease Close revoked: the
// core's, so the event reads alike on both backends.
var errRevoked = leaserouter.ErrClosed

// errExhausted is the Err of EventDead for a job whose last lease was
// released (or revoked).
var errExhausted = errors.New(contract.AttemptsExhausted)

// opResult is what a single lease's statement reports (a row of
// lease_end.sql or lease_heartbeat.sql), or what inspect reads (token,
// was, ended).
type opResult struct {
	id     string
	held   int64      // the lease's token
	ok     bool       // the statement acted on the lease
	state  *string    // the state it left (a leaserouter.State's name)
	expiry *time.Time // the expiry it left (heartbeats)
	at     *time.Time // the instant of the change
	token  *int64     // the job's token as found; nil if the row is gone
	was    *string    // its state as found
	ended  *string    // why its latest lease ended, as found
	live   bool       // as found, its lease's expiry is ahead on the database's clock (leases_inspect.sql)
	xid    uint64     // in a caller's transaction, done: the full ID of the (sub)transaction that wrote it
}

// scan reads the row of lease_end.sql or lease_heartbeat.sql.
func (res *opResult) scan(row pgx.Row) error {
	return row.Scan(&res.id, &res.held, &res.ok, &res.state, &res.expiry, &res.at, &res.token, &res.was, &res.ended)
}

// endArgs are lease_end.sql's arguments ending l for reason: no error
// of its own, not permanent, no backoff, not a resolvable operation.
func (l *Lease[T]) endArgs(reason leaserouter.LostReason) args {
	return args{"queue": l.r.opts.Queue, "id": l.JobID, "token": int64(l.Token), "reason": string(reason),
		"permanent": false, "delay_us": int64(0), "error": nil, "retention_us": l.r.keep, "op": int64(0)}
}

// endManyArgs are leases_end.sql's arguments ending ls for reason;
// acceptEnded counts a lease ended for reason already as ended now (a
// retry of a statement whose reply was lost). The statement's id (op) is
// a random one: a completion at a Retention below zero deletes its rows
// and records their leases under it (see endedBy).
func (r *Router[T]) endManyArgs(ls []*Lease[T], reason leaserouter.LostReason, acceptEnded bool) args {
	ids, tokens := leaseKeys(ls)
	return args{"queue": r.opts.Queue, "ids": ids, "tokens": tokens, "reason": string(reason),
		"retention_us": r.keep, "accept_ended": acceptEnded, "op": newClaimID()}
}

// ended is a lease a leases_end.sql ended: the state it left, the
// instant, and whether the job's row is gone (a completion at a
// Retention below zero deletes it).
type ended struct {
	state string
	at    time.Time
	gone  bool
}

// endUnknown keeps, on each of ls, the id of a leases_end.sql
// completing them whose outcome is unknown (a of endManyArgs), for their
// next completion (endedBy). Only a completion that may delete rows
// needs it (r.keep 0: a Retention below zero).
func (r *Router[T]) endUnknown(ls []*Lease[T], a args) {
	if r.keep != 0 {
		return
	}
	for _, l := range ls {
		l.mu.Lock()
		l.endOps = append(l.endOps, a["op"].(int64))
		l.mu.Unlock()
	}
}

// endOpsOf returns the ids of the earlier completions of ls whose
// outcome is unknown (endUnknown), nil if none.
func endOpsOf[T any](ls []*Lease[T]) []int64 {
	var ops []int64
	for _, l := range ls {
		l.mu.Lock()
		ops = append(ops, l.endOps...)
		l.mu.Unlock()
	}
	return ops
}

// readEndedBy reads the rows of leases_ended.sql (sent after a retry's
// leases_end.sql, in its transaction or after it: the earlier
// completions ops, endOpsOf, that deleted rows): each lease they ended,
// by token, with its instant.
func readEndedBy(rows pgx.Rows, err error) (map[leaserouter.Token]time.Time, error) {
	if err != nil {
		return nil, err
	}
	at := map[leaserouter.Token]time.Time{}
	for rows.Next() {
		var token int64
		var t time.Time
		if err := rows.Scan(&token, &t); err != nil {
			rows.Close()
			return nil, err
		}
		at[leaserouter.Token(token)] = t
	}
	return at, rows.Err()
}

// endedBy adds to done the leases of ls that earlier completions ended
// by deleting their rows (at, from readEndedBy): with no row left, the
// retry itself cannot see them ended. Tokens are unique within the
// schema (one sequence for every queue), and the records read are the
// schema's, so a token recorded is this lease's.
func endedBy[T any](ls []*Lease[T], done map[leaseKey]ended, at map[leaserouter.Token]time.Time) {
	for _, l := range ls {
		if t, ok := at[l.Token]; ok {
			done[keyOf(l)] = ended{state: dbState(leaserouter.StateSucceeded), at: t, gone: true}
		}
	}
}

// readEnded reads the rows of a leases_end.sql, by lease.
func readEnded(rows pgx.Rows, err error) (map[leaseKey]ended, error) {
	if err != nil {
		return nil, err
	}
	out := map[leaseKey]ended{}
	for rows.Next() {
		var k leaseKey
		var token int64
		var e ended
		if err := rows.Scan(&k.id, &token, &e.state, &e.at, &e.gone); err != nil {
			rows.Close()
			return nil, err
		}
		k.token = leaserouter.Token(token)
		out[k] = e
	}
	return out, rows.Err()
}

// queueLock queues op's row lock on b: lockRow, or in a caller's
// transaction (inTx, under op's savepoint) lockRowOfToken. A refusal in
// a caller's transaction rolls back to the savepoint even if ctx ended
// (see endSavepoint), so a lock the check took never outlives it.
func (l *Lease[T]) queueLock(b *pgx.Batch, inTx bool) {
	if inTx {
		b.Queue(l.r.st.lockRowOfToken, args{"queue": l.r.opts.Queue, "id": l.JobID, "token": int64(l.Token)})
		return
	}
	b.Queue(l.r.st.lockRow, args{"queue": l.r.opts.Queue, "id": l.JobID})
}

// op runs stmt (lease_end.sql or lease_heartbeat.sql, with its
// arguments a) on q after locking l's row (lease_lock.sql),
// in one round trip and one transaction (q's own, or the batch's
// implicit one). A refusal returns a *LeaseLostError, reported and no
// longer held; a caller whose operation ended the lease reports it, then
// releases it (r.release).
//
// A non-zero id makes the operation resolvable (see outcome.go): the
// transaction first takes the advisory lock on id, and the statement acts
// only if id is not marked abandoned (a["op"]); if its outcome is
// unknown, id is kept on l for the resolution.
//
// inTx: q is the caller's transaction (nothing else may run on the pool
// meanwhile: the caller may hold its last connection). The check runs
// under a savepoint: rolled back to on a refusal or an error (a second
// round trip), so the row lock it took is let go at once (a stale
// caller's open transaction never blocks the valid holder) and the
// transaction stays usable; left in place on success (see CompleteTx),
// with res.xid the (sub)transaction that wrote the change.
func (l *Lease[T]) op(ctx context.Context, q querier, inTx bool, id int64, call, stmt string, a args) (opResult, error) {
	var res opResult
	if l == nil || l.r == nil {
		return res, &leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease}
	}
	r := l.r
	b := &pgx.Batch{}
	if inTx {
		b.Queue("SAVEPOINT " + savepoint)
	}
	if id != 0 {
		b.Queue(r.st.claimLock, args{"id": id})
	}
	l.queueLock(b, inTx)
	b.Queue(stmt, a)
	var top string
	var sub int64
	if inTx {
		b.Queue(r.st.writerOf, args{"queue": r.opts.Queue, "id": l.JobID})
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
		if err = res.scan(br.QueryRow()); errors.Is(err, pgx.ErrNoRows) {
			err = nil // the job's row is gone (purged): refused, token nil
		}
	}
	if err == nil && inTx && res.ok { // refused: the row may be gone, and r.st.writerOf has nothing to say
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
	r.emit(stale) // before the release: Close delivers every event of a lease it waited for
	r.release(l)  // refused: the lease is lost, nothing left to hold
	if e.Reason == leaserouter.LostExpired && !inTx {
		r.settle(ctx) // found expired: settle it now, as the core's refusal does
	}
	return res, e
}

// lost builds the refusal's error from the row as the refusing statement
// found it, with its row locked.
func (l *Lease[T]) lost(res opResult) *leaserouter.LeaseLostError {
	e := &leaserouter.LeaseLostError{JobID: l.JobID, Token: l.Token, Reason: "unknown"}
	switch {
	case res.token == nil: // the job's row is gone (purged)
	case leaserouter.Token(*res.token) != l.Token:
		e.Current, e.Reason = leaserouter.Token(*res.token), leaserouter.LostSuperseded
	case isState(res.was, leaserouter.StateLeased):
		// Still leased with this token, yet refused: its expiry had
		// passed at the moment the row was locked.
		e.Current, e.Reason = l.Token, leaserouter.LostExpired
	default:
		e.Current = l.Token
		if res.ended != nil && *res.ended != "" {
			e.Reason = leaserouter.LostReason(*res.ended)
		}
	}
	return e
}

// isState reports whether name (a state column's label) is s.
func isState(name *string, s leaserouter.State) bool { return name != nil && *name == dbState(s) }

// deadLabel is StateDead's label in the state column's enum: the state's
// name when migration 0003 made the enum. The label stays: renaming it
// (ALTER TYPE ... RENAME VALUE) would lock the type, and every process of
// an older version still running in a rolling upgrade writes and reads
// 'failed'. The SQL files say 'failed' too.
const deadLabel = "failed"

// dbState is s's label in the state column's enum (migration 0003):
// State.String, but deadLabel for StateDead.
func dbState(s leaserouter.State) string {
	if s == leaserouter.StateDead {
		return deadLabel
	}
	return s.String()
}

// stateNamed is the leaserouter.State whose label (dbState) is name, a
// label of the state column's enum, and whether there is one.
func stateNamed(name string) (leaserouter.State, bool) {
	for s := leaserouter.StatePending; s <= leaserouter.StateCanceled; s++ {
		if dbState(s) == name {
			return s, true
		}
	}
	return 0, false
}

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

// readInstants reads the (job ID, token, instant) rows of
// leases_hand_back.sql.
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

// completedMany counts and reports a completion of ls that completed
// those in done; the others were refused. The leases are released after
// their events are recorded.
func (r *Router[T]) completedMany(ls []*Lease[T], done map[leaseKey]ended) {
	var evs []leaserouter.Event
	now := time.Now()
	gone := 0
	for _, e := range done {
		if e.gone {
			gone++
		}
	}
	if r.ev != nil {
		for _, l := range ls {
			if e, ok := done[keyOf(l)]; ok {
				evs = append(evs, l.event(leaserouter.EventCompleted, e.at))
				if e.gone { // deleted with its completion (Retention < 0): purged at once, as the purge reports it
					evs = append(evs, leaserouter.Event{Kind: leaserouter.EventPurged, Time: e.at, JobID: l.JobID,
						Token: l.Token, Attempt: l.Attempt})
				}
			} else {
				e := l.event(leaserouter.EventStaleRejected, now)
				e.Held, e.Err = 0, leaserouter.ErrLeaseLost
				evs = append(evs, e)
			}
		}
	} else { // no events to build: History's counts alone
		tallyEnded(r.hist, ls, done, now)
	}
	r.mu.Lock()
	r.stats.StaleRejections += uint64(len(ls) - len(done))
	r.stats.Purged += uint64(gone)
	r.mu.Unlock()
	r.emit(evs...)
	for _, l := range ls {
		r.release(l)
	}
}

// inspect reads the rows of ls's jobs without locking them (current
// token, state, why the last lease ended, whether its lease is
// unexpired), by job ID; a job whose row is gone is missing.
func (r *Router[T]) inspect(ctx context.Context, q querier, ls []*Lease[T]) (map[string]opResult, error) {
	found := map[string]opResult{}
	if len(ls) == 0 {
		return found, nil
	}
	ids, _ := leaseKeys(ls)
	rows, err := q.Query(ctx, r.st.inspectLeases, args{"queue": r.opts.Queue, "ids": ids})
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var res opResult
		if err := rows.Scan(&res.id, &res.token, &res.was, &res.ended, &res.live); err != nil {
			rows.Close()
			return nil, err
		}
		found[res.id] = res
	}
	return found, rows.Err()
}
