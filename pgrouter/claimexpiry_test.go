package pgrouter_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

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
// then leased (attempt 1) and completed.
func TestClaimWithLostReplyCountsNoAttemptAfterExpiry(t *testing.T) {
	base := pgtest.New(t)
	p := newCutProxy(t, socketOf(base), "nextval('leaserouter_token')")
	p.blackout.Store(true)
	db := poolVia(t, base, p.ln, 0)
	const lease = time.Second
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: lease, MaxAttempts: 1, PollInterval: 100 * time.Millisecond})
	routerOn[int](t, base, pgrouter.Options{LeaseDuration: lease, MaxAttempts: 1, PollInterval: 50 * time.Millisecond}) // settles
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	p.armed.Store(true)
	_, err := r.TryAcquire(ctx, "w")
	require.Error(t, err, "the reply was lost")
	require.EqualValues(t, 1, p.cut.Load())
	eventually(t, 10*time.Second, "the lease nobody received expired and settled (dead) elsewhere", func() bool {
		st, _ := jobState(t, base, "a")
		return st == leaserouter.StateFailed
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
	require.NoError(t, l.Complete(ctx))
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
		"lease_us": d.Microseconds(), "claim": id})
	require.NoError(t, err)
	require.True(t, rows.Next(), "the claim leased a job")
	vals, err := rows.Values()
	require.NoError(t, err)
	require.False(t, rows.Next())
	rows.Close()
	require.NoError(t, rows.Err())
	require.NoError(t, tx.Commit(ctx))
	return vals[0].(string), vals[6].(time.Time), vals[5].(time.Time)
}

// TestClaimResolverUndoesOnlyTheLostClaimsExpiry: the resolver of a lost
// claim undoes the expiry settlement of the claim's lease only where
// nothing happened since: a job re-leased since (then completed), or
// canceled, is left as it is; a job that died of the expiry is pending
// again, ready since the claim's grant, with no attempt counted and its
// state as before the claim; and a resolver run again (a retry after an
// error whose transaction had committed) changes nothing more, whether
// the first run undid a settlement or handed a valid lease back.
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
	require.Equal(t, leaserouter.StateFailed, readJob(t, db, id).state, "dead of the expiry")
	resolve(101)
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
