package pgrouter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// holdRow begins a transaction on db that locks job id's row, as a lease
// operation in flight (or a CompleteTx in its caller's transaction) holds
// it; the transaction is rolled back when t ends, if not before.
func holdRow(t *testing.T, db *pgxpool.Pool, id string) pgx.Tx {
	t.Helper()
	tx, err := db.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(t.Context(), "SELECT FROM leaserouter_jobs WHERE queue = 'default' AND id = $1 FOR UPDATE", id)
	require.NoError(t, err)
	return tx
}

// awaitLockWait waits until a session of db waits for a row lock.
func awaitLockWait(t *testing.T, db *pgxpool.Pool, what string) {
	t.Helper()
	eventually(t, 10*time.Second, what, func() bool {
		var waiting int
		require.NoError(t, db.QueryRow(t.Context(),
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").Scan(&waiting))
		return waiting > 0
	})
}

// TestBulkCallsNeverDeadlockWithRunsCompletions: a bulk call waits for
// rows only in ID order, the order Run's completions (leases_end) lock
// theirs in. Run completes "a" and "b" (b's lease expired a moment ago)
// and has locked "a"; CancelMany must not take "b" meanwhile (as a
// settling round in its transaction did, in expiry order) and then wait
// for "a" while the completion waits for "b". The completion is run by
// hand: "a" locked, then leases_end on both, in one transaction.
func TestBulkCallsNeverDeadlockWithRunsCompletions(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 50 * time.Millisecond, PollInterval: time.Hour})
	ctx := t.Context()
	la, lb := leaseOn(t, r, "a"), leaseOn(t, r, "b")
	var expiry time.Time
	require.NoError(t, db.QueryRow(ctx, "SELECT max(lease_expires_at) FROM leaserouter_jobs").Scan(&expiry))
	awaitDBTime(t, db, expiry)

	tx := holdRow(t, db, "a") // Run's completion, as far as its first row
	done := make(chan error, 1)
	go func() {
		_, err := r.CancelMany(ctx, []string{"a", "b"}, nil)
		done <- err
	}()
	awaitLockWait(t, db, "CancelMany waits for a row lock")
	sql, names := pgrouter.Statement("leases_end")
	_, err1 := tx.Exec(ctx, sql, bindPositional(names, map[string]any{"queue": "default", "ids": []string{"a", "b"},
		"tokens": []int64{int64(la.Token), int64(lb.Token)}, "reason": "completed", "accept_ended": true,
		"retention_us": int64(time.Hour / time.Microsecond)})...)
	if err1 == nil {
		err1 = tx.Commit(ctx)
	}
	err2 := <-done
	var pe *pgconn.PgError
	for i, err := range []error{err1, err2} {
		name := [...]string{"the completion", "CancelMany"}[i]
		require.False(t, errors.As(err, &pe) && pe.Code == "40P01", "%s: %v", name, err)
		require.NoError(t, err, name)
	}
}

// TestBulkCallsJudgeALeasePastItsExpiryAsTheExpiryLeftIt: a lease past
// its expiry is settled before its job is judged, as the core settles
// what is due first, even when the queue's settling round skipped it (a
// lease operation on it in flight, which then changes nothing): with one
// attempt the job is dead, so DeleteMany deletes it and CancelMany finds
// it finished (not applicable), each expiry reported (EventLeaseExpired,
// EventDead, Stats.Dead) and none reported as a cancel.
func TestBulkCallsJudgeALeasePastItsExpiryAsTheExpiryLeftIt(t *testing.T) {
	var (
		mu  sync.Mutex
		evs []leaserouter.Event
	)
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 50 * time.Millisecond, MaxAttempts: 1, PollInterval: time.Hour,
		OnEvent: func(e leaserouter.Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() }})
	ctx := t.Context()
	leaseOn(t, r, "del")
	leaseOn(t, r, "can")
	var expiry time.Time
	require.NoError(t, db.QueryRow(ctx, "SELECT max(lease_expires_at) FROM leaserouter_jobs").Scan(&expiry))
	awaitDBTime(t, db, expiry)

	calls := map[string]func() (leaserouter.BulkResult, error){
		"del": func() (leaserouter.BulkResult, error) { return r.DeleteMany(ctx, []string{"del"}, nil) },
		"can": func() (leaserouter.BulkResult, error) { return r.CancelMany(ctx, []string{"can"}, nil) },
	}
	want := map[string]leaserouter.BulkResult{"del": {Done: 1}, "can": {NotApplicable: 1}}
	for _, id := range []string{"del", "can"} {
		tx := holdRow(t, db, id)
		done := make(chan error, 1)
		var res leaserouter.BulkResult
		go func() {
			var err error
			res, err = calls[id]()
			done <- err
		}()
		awaitLockWait(t, db, id+": the bulk call waits for the row")
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, <-done, id)
		require.Equal(t, want[id], res, "%s: the lease had expired: the job is dead", id)
	}
	j, ok, err := r.Get(ctx, "can")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StateDead, j.State, "dead by its expiry, not canceled")
	_, ok, err = r.Get(ctx, "del")
	require.NoError(t, err)
	require.False(t, ok, "deleted")
	st, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Dead)
	require.NoError(t, r.Close(ctx))
	mu.Lock()
	defer mu.Unlock()
	count := map[leaserouter.EventKind]int{}
	for _, e := range evs {
		count[e.Kind]++
	}
	require.Equal(t, 2, count[leaserouter.EventLeaseExpired])
	require.Equal(t, 2, count[leaserouter.EventDead])
	require.Zero(t, count[leaserouter.EventCanceled])
	require.Equal(t, 1, count[leaserouter.EventPurged])
}
