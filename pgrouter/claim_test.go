package pgrouter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestClaimDuringClose: a claim whose round trip is still going when
// Close runs (here: stalled on the token sequence) hands its leases back
// and returns ErrClosed, instead of granting a lease nobody will revoke.
func TestClaimDuringClose(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	stall, err := db.Begin(ctx)
	require.NoError(t, err)
	// A failing check must not leave the claim blocked (Cleanup would wait).
	defer func() { _ = stall.Rollback(context.Background()) }()
	_, err = stall.Exec(ctx, "ALTER SEQUENCE leaserouter_token CACHE 1") // nextval waits for it
	require.NoError(t, err)
	claimed := make(chan error, 1)
	go func() {
		_, err := r.TryAcquire(ctx, "w")
		claimed <- err
	}()
	eventually(t, 10*time.Second, "claim waiting on the sequence", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE NOT granted AND relation = 'leaserouter_token'::regclass`).Scan(&n))
		return n > 0
	})
	require.NoError(t, r.Close(ctx), "no lease held yet")
	require.NoError(t, stall.Rollback(ctx))
	require.ErrorIs(t, <-claimed, leaserouter.ErrClosed)
	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StatePending, j.State, "handed back")
	require.Zero(t, j.Attempt, "the lease handed back is no attempt")
}

// awaitClaimResolved waits until a claim whose outcome was unknown has
// been resolved (its resolver marked it abandoned: from then on it claims
// nothing, and whatever it had leased was handed back in the same
// transaction), then requires job id pending with no attempt counted.
func awaitClaimResolved(t *testing.T, base *pgxpool.Pool, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		require.NoError(t, base.QueryRow(context.Background(), "SELECT count(*) FROM leaserouter_abandoned_claims").Scan(&n))
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			st, attempt := jobState(t, base, id)
			t.Fatalf("the claim was not resolved within 10s: job %s is %v, attempt %d", id, st, attempt)
		}
	}
	st, attempt := jobState(t, base, id)
	require.Equal(t, leaserouter.StatePending, st, "the lease nobody received handed back")
	require.Zero(t, attempt, "the lease nobody received is no attempt")
}

// TestClaimWithLostReplyCountsNoAttempt: the server commits a claim whose
// reply never reaches the client (the connection is cut right after the
// execution was sent). The claim's outcome is resolved by reading the
// rows back: the lease nobody received is handed back with its attempt
// not counted, so a job with MaxAttempts 1 is leased again (attempt 1)
// and completes, rather than expiring dead without a handler ever
// running.
func TestClaimWithLostReplyCountsNoAttempt(t *testing.T) {
	base := pgtest.New(t)
	p := newCutProxy(t, serverInTheClear(t, base), "nextval('leaserouter_token')")
	db := poolVia(t, base, p.ln, 0)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: time.Second, MaxAttempts: 1, PollInterval: 100 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	p.armed.Store(true)
	_, err := r.TryAcquire(ctx, "w")
	require.Error(t, err, "the reply was lost")
	require.EqualValues(t, 1, p.cut.Load(), "the claim's connection was cut after its execution was sent")
	awaitClaimResolved(t, base, "a")
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err, "the job is leased again, not dead")
	require.Equal(t, 1, l.Attempt, "the lost claim was no attempt")
	require.NoError(t, l.Complete(ctx))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
}

// claimByHand runs claim id's statements (its advisory lock, then the
// claim of one job of the default queue for worker "w") in tx, as a
// claim's batch does, and returns the IDs of the jobs it leased.
func claimByHand(t *testing.T, tx pgx.Tx, id int64) []string {
	t.Helper()
	lock, claim := pgrouter.ClaimStatements()
	_, err := tx.Exec(t.Context(), lock, pgx.NamedArgs{"id": id})
	require.NoError(t, err)
	rows, err := tx.Query(t.Context(), claim, pgx.NamedArgs{"queue": pgrouter.DefaultQueue, "n": 1, "worker": "w",
		"lease_us": time.Hour.Microseconds(), "claim": id, "kind_1": ""})
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		ids = append(ids, vals[0].(string))
	}
	require.NoError(t, rows.Err())
	return ids
}

// TestClaimResolverWaitsForClaimInFlight: the resolver of a claim whose
// outcome is unknown waits for the claim's transaction if it is still
// running (the claim's advisory lock), so a claim that commits after the
// resolver began is still found and handed back, the attempt not
// counted.
func TestClaimResolverWaitsForClaimInFlight(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	const id = 42
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.Equal(t, []string{"a"}, claimByHand(t, tx, id), "the claim leased the job (not committed yet)")
	resolved := make(chan error, 1)
	go func() { resolved <- pgrouter.ResolveClaim(ctx, r, id) }()
	var early error
	returned := false
	eventually(t, 10*time.Second, "the resolver waiting for the claim's transaction (or done)", func() bool {
		select {
		case early = <-resolved:
			returned = true // did not wait: the check below fails
			return true
		default:
		}
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n))
		return n > 0
	})
	require.NoError(t, tx.Commit(ctx))
	if !returned {
		early = <-resolved
	}
	require.NoError(t, early)
	st, attempt := jobState(t, db, "a")
	require.Equal(t, leaserouter.StatePending, st, "the claim's lease handed back")
	require.Zero(t, attempt, "the lease nobody received is no attempt")
}

// TestAbandonedClaimArrivingLateClaimsNothing: a claim that reaches the
// server after its client resolved it (delayed in the network, say) claims
// nothing: no lease can be granted that nobody will receive.
func TestAbandonedClaimArrivingLateClaimsNothing(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	const id = 43
	require.NoError(t, pgrouter.ResolveClaim(ctx, r, id))
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.Empty(t, claimByHand(t, tx, id), "the abandoned claim leased nothing")
	require.NoError(t, tx.Commit(ctx))
	st, attempt := jobState(t, db, "a")
	require.Equal(t, leaserouter.StatePending, st)
	require.Zero(t, attempt)
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err, "other claims go on")
	require.Equal(t, "a", l.JobID)
}

// TestAcquireHonoursCtxWithPoolExhausted: Acquire whose claim waits for
// a connection of an exhausted pool returns ctx.Err() when its ctx ends
// (within 1s here; the library's own wait is a few ms), and claims
// nothing.
func TestAcquireHonoursCtxWithPoolExhausted(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	cfg.MaxConns = 1
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: ctxLease})
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	held, err := db.Acquire(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = r.Acquire(ctx, "w")
	late := time.Since(deadlineOf(ctx))
	held.Release()
	t.Logf("Acquire returned %v after its ctx ended (pool exhausted): %v", late, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, late, time.Second, "Acquire returns when its ctx ends")
	st, attempt := jobState(t, base, "a")
	require.Equal(t, leaserouter.StatePending, st)
	require.Zero(t, attempt)
}

// TestAcquireHonoursCtxWithServerStalled: Acquire whose claim was sent to
// a server that stalls returns ctx.Err() when its ctx ends (within 1s
// here); the claim's outcome, unknown then, is resolved in the background
// once the server answers again: the job is pending with no attempt
// counted, whether the claim ran late or never.
func TestAcquireHonoursCtxWithServerStalled(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, serverOf(base))
	db := poolVia(t, base, p.ln, 0)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: ctxLease, MaxAttempts: 1})
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	p.stall()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := r.Acquire(ctx, "w")
	late := time.Since(deadlineOf(ctx))
	t.Logf("Acquire returned %v after its ctx ended (server stalled): %v", late, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, late, time.Second, "Acquire returns when its ctx ends")
	p.resume()
	awaitClaimResolved(t, base, "a")
	l, err := r.TryAcquire(t.Context(), "w")
	require.NoError(t, err)
	require.Equal(t, 1, l.Attempt)
}

// TestLeaseProvenFromClaimSendNotPoolWait: a Run worker whose claim
// waited for the pool's only connection (held elsewhere for most of a
// LeaseDuration) gets a lease proven for a LeaseDuration from the claim's
// send, not from before the wait: its handler's ctx is not canceled as
// unproven, and the attempt is not wasted.
func TestLeaseProvenFromClaimSendNotPoolWait(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	cfg.MaxConns = 1
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	const lease = 2 * time.Second
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: lease})
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	held, err := db.Acquire(t.Context())
	require.NoError(t, err)
	// Heartbeat rounds at 1.2s (no lease yet: the claim waits for the
	// pool) and 2.4s; the connection is free at 1.5s. Proven from before
	// the wait, the lease would end at 2s, before any round could extend
	// it; proven from the send, at 3.5s.
	go func() {
		time.Sleep(1500 * time.Millisecond)
		held.Release()
	}()
	var canceled atomic.Value
	stop := make(chan struct{})
	err = runUntil(t, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: 1200 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			defer close(stop)
			select {
			case <-hctx.Done():
				canceled.Store(fmt.Sprint(context.Cause(hctx)))
				return hctx.Err()
			case <-time.After(time.Second):
				return nil
			}
		})
	require.NoError(t, err)
	require.Nil(t, canceled.Load(), "the handler's ctx was canceled although its lease was valid")
	j, _, err := r.Get(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	require.Equal(t, 1, j.Attempt)
}

// jobRow is what the claim tests read of a job's row (on base, with no
// settling).
type jobRow struct {
	state              leaserouter.State
	attempt            int
	token              int64
	requeued, purgeDue bool
	ended, lastError   string
	readyAt            time.Time
}

func readJob(t *testing.T, base *pgxpool.Pool, id string) jobRow {
	t.Helper()
	var j jobRow
	var state string
	var attempt int32
	require.NoError(t, base.QueryRow(context.Background(), `SELECT state::text, attempt, token, requeued,
			purge_at IS NOT NULL, ended, last_error, ready_at
		FROM leaserouter_jobs WHERE id = $1`, id).
		Scan(&state, &attempt, &j.token, &j.requeued, &j.purgeDue, &j.ended, &j.lastError, &j.readyAt))
	j.state, j.attempt = stateNamed(t, state), int(attempt)
	return j
}

// TestClaimWithLostReplyCountsNoAttemptAfterExpiry: a claim whose reply
// was lost, with the database unreachable from the claimer for longer
// than LeaseDuration, so that another process settles the expiry of the
// lease nobody received (with MaxAttempts 1: the job dead) before the
// claim is resolved: the resolver undoes the settlement, and the job is
// pending as before the claim (attempt 0, no error, not due for purge),
// then leased (attempt 1). Unreachable means through every connection:
// the pool's other connections, open before the cut, are cut too.
func TestClaimWithLostReplyCountsNoAttemptAfterExpiry(t *testing.T) {
	base := pgtest.New(t)
	p := newCutProxy(t, serverInTheClear(t, base), "nextval('leaserouter_token')")
	p.blackout.Store(true)
	db := poolVia(t, base, p.ln, 0)
	const lease = time.Second
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: lease, MaxAttempts: 1, PollInterval: 100 * time.Millisecond})
	routerOn[int](t, base, pgrouter.Options{LeaseDuration: lease, MaxAttempts: 1, PollInterval: 50 * time.Millisecond}) // settles
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	// A second connection of r's pool open at the cut, as r's background
	// work leaves one on a busy machine: the blackout must reach it too,
	// or the claim is resolved through it before the lease expires.
	c1, err := db.Acquire(ctx)
	require.NoError(t, err)
	c2, err := db.Acquire(ctx)
	require.NoError(t, err)
	c1.Release()
	c2.Release()
	require.GreaterOrEqual(t, db.Stat().IdleConns(), int32(2))
	p.armed.Store(true)
	defer func() {
		if t.Failed() {
			var tokens int64
			var expiry string
			_ = base.QueryRow(context.Background(), "SELECT last_value FROM leaserouter_token").Scan(&tokens)
			_ = base.QueryRow(context.Background(), "SELECT coalesce((lease_expires_at - clock_timestamp())::text, 'none') FROM leaserouter_jobs WHERE id = 'a'").Scan(&expiry)
			t.Logf("at the failure: job a %+v, lease expires in %s; token sequence at %d", readJob(t, base, "a"), expiry, tokens)
		}
	}()
	_, err = r.TryAcquire(ctx, "w")
	require.Error(t, err, "the reply was lost")
	require.EqualValues(t, 1, p.cut.Load())
	eventually(t, 10*time.Second, "the lease nobody received expired and settled (dead) elsewhere", func() bool {
		st, _ := jobState(t, base, "a")
		return st == leaserouter.StateDead
	})
	var marks int
	require.NoError(t, base.QueryRow(ctx, "SELECT count(*) FROM leaserouter_abandoned_claims").Scan(&marks))
	require.Zero(t, marks, "the claim is not resolved while the database is unreachable")
	p.down.Store(false)
	awaitClaimResolved(t, base, "a") // pending, attempt 0
	j := readJob(t, base, "a")
	require.False(t, j.purgeDue, "not due for purge")
	require.Empty(t, j.lastError, "no error: the job never ran")
	require.False(t, j.requeued)
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err, "the job is leased again, not dead")
	require.Equal(t, 1, l.Attempt, "the lost claim was no attempt")
	// Not completed: the lease is a second long, and on a busy machine the
	// round trip can outlast it; what this test keeps is the attempt count.
}

// lostClaim runs, by hand, claim id of the one pending job of db's
// default queue with lease d, and commits it (as a server does whose
// reply the client never gets): it returns the job's ID, the grant's
// instant and the lease's expiry.
func lostClaim(t *testing.T, db *pgxpool.Pool, id int64, d time.Duration) (string, time.Time, time.Time) {
	t.Helper()
	ctx := t.Context()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	lock, claim := pgrouter.ClaimStatements()
	_, err = tx.Exec(ctx, lock, pgx.NamedArgs{"id": id})
	require.NoError(t, err)
	rows, err := tx.Query(ctx, claim, pgx.NamedArgs{"queue": pgrouter.DefaultQueue, "n": 1, "worker": "w",
		"lease_us": d.Microseconds(), "claim": id, "kind_1": ""})
	require.NoError(t, err)
	require.True(t, rows.Next(), "the claim leased a job")
	vals, err := rows.Values()
	require.NoError(t, err)
	require.False(t, rows.Next())
	rows.Close()
	require.NoError(t, rows.Err())
	require.NoError(t, tx.Commit(ctx))
	return vals[0].(string), vals[9].(time.Time), vals[8].(time.Time) // id, updated_at (the grant), lease_expires_at
}

// TestClaimResolverUndoesOnlyTheLostClaimsExpiry: the resolver of a lost
// claim undoes the expiry settlement of the claim's lease only where
// nothing happened since: a job re-leased since (then completed), or
// canceled, is left as it is; a job that died of the expiry is pending
// again, ready since the claim's grant, with no attempt counted and its
// state as before the claim; and a resolver run again (a retry after an
// error whose transaction had committed) changes nothing more, whether
// the first run undid a settlement or handed a valid lease back. The
// undone expiry's record leaves the job's error history.
func TestClaimResolverUndoesOnlyTheLostClaimsExpiry(t *testing.T) {
	const lease = 200 * time.Millisecond
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: lease, PollInterval: time.Hour})
	ctx := t.Context()
	settleAfter := func(id string, expiry time.Time) {
		t.Helper()
		awaitDBTime(t, db, expiry)
		_, _, err := r.Get(ctx, id) // settles what is due
		require.NoError(t, err)
	}
	resolve := func(claim int64) {
		t.Helper()
		require.NoError(t, pgrouter.ResolveClaim(ctx, r, claim))
	}

	// Died of the expiry (first attempt): pending again as before.
	require.NoError(t, r.Enqueue(ctx, "first", 1, leaserouter.WithMaxAttempts(1)))
	id, granted, expiry := lostClaim(t, db, 101, lease)
	require.Equal(t, "first", id)
	settleAfter(id, expiry)
	require.Equal(t, leaserouter.StateDead, readJob(t, db, id).state, "dead of the expiry")
	require.Len(t, getJob(t, r, id).Errors, 1, "the expiry recorded")
	resolve(101)
	require.Nil(t, getJob(t, r, id).Errors, "the undone expiry's record removed")
	j := readJob(t, db, id)
	require.Equal(t, leaserouter.StatePending, j.state)
	require.Zero(t, j.attempt)
	require.False(t, j.purgeDue)
	require.False(t, j.requeued)
	require.Empty(t, j.lastError)
	require.True(t, j.readyAt.Equal(granted), "ready since the grant (%v), not the expiry: %v", granted, j.readyAt)
	resolve(101)
	require.Equal(t, j, readJob(t, db, id), "a second run changes nothing")
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 1, l.Attempt)
	require.NoError(t, l.Complete(ctx))

	// Re-leased since (by another claim), then completed: left alone.
	require.NoError(t, r.Enqueue(ctx, "re", 1))
	id, _, expiry = lostClaim(t, db, 102, lease)
	awaitDBTime(t, db, expiry)
	next, err := r.TryAcquire(ctx, "w2") // settles, then leases it again
	require.NoError(t, err)
	require.Equal(t, "re", next.JobID)
	require.Equal(t, 2, next.Attempt)
	resolve(102)
	j = readJob(t, db, id)
	require.Equal(t, leaserouter.StateLeased, j.state, "the newer lease is untouched")
	require.Equal(t, 2, j.attempt)
	require.Equal(t, int64(next.Token), j.token)
	require.NoError(t, next.Complete(ctx))
	resolve(102)
	j = readJob(t, db, id)
	require.Equal(t, leaserouter.StateSucceeded, j.state)
	require.Equal(t, 2, j.attempt)

	// Canceled since: left alone.
	require.NoError(t, r.Enqueue(ctx, "canceled", 1))
	id, _, expiry = lostClaim(t, db, 103, lease)
	awaitDBTime(t, db, expiry)
	require.NoError(t, r.Cancel(ctx, id)) // settles the expiry first
	resolve(103)
	j = readJob(t, db, id)
	require.Equal(t, leaserouter.StateCanceled, j.state)
	require.Equal(t, 1, j.attempt)

	// A later attempt: the attempt not counted; run twice, once undone.
	require.NoError(t, r.Enqueue(ctx, "later", 1))
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx)) // attempt 1 counted
	id, _, expiry = lostClaim(t, db, 104, lease)
	settleAfter(id, expiry)
	require.Equal(t, 2, readJob(t, db, id).attempt, "the settlement counted the lost claim's lease")
	resolve(104)
	resolve(104)
	j = readJob(t, db, id)
	require.Equal(t, leaserouter.StatePending, j.state)
	require.Equal(t, 1, j.attempt, "undone once")
	require.Nil(t, getJob(t, r, id).Errors, "the released attempt left none, the undone expiry's record removed once")

	// A valid lease of a job requeued by an earlier expiry, handed back:
	// run twice, handed back once.
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "later", l.JobID)
	settleAfter(l.JobID, l.Expiry()) // attempt 2 expired: requeued
	id, _, _ = lostClaim(t, db, 105, time.Hour)
	require.Equal(t, "later", id)
	require.Equal(t, 3, readJob(t, db, id).attempt)
	resolve(105)
	resolve(105)
	j = readJob(t, db, id)
	require.Equal(t, leaserouter.StatePending, j.state)
	require.Equal(t, 2, j.attempt, "handed back once")
}

// TestClaimAtMostMaxBatch: one TryAcquireMany leases at most
// leaserouter.MaxBatch jobs, however many more max asks for and are
// ready (a declared difference from the core); the next call leases the
// rest.
func TestClaimAtMostMaxBatch(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	enqueueJobs(t, r, "a", leaserouter.MaxBatch+10)
	ls, err := r.TryAcquireMany(ctx, "w", 5000)
	require.NoError(t, err)
	require.Len(t, ls, leaserouter.MaxBatch)
	for i := 1; i < len(ls); i++ {
		require.Greater(t, ls[i].Token, ls[i-1].Token, "tokens increase in the ready order")
	}
	ls, err = r.TryAcquireMany(ctx, "w", 5000)
	require.NoError(t, err)
	require.Len(t, ls, 10)
}
