package pgrouter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestMigrateConcurrent: Migrate is idempotent and safe when many
// processes (here, connections) run it at once.
func TestMigrateConcurrent(t *testing.T) {
	db := pgtest.New(t) // migrated once already
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pgrouter.Migrate(t.Context(), db) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var n, v int
	require.NoError(t, db.QueryRow(t.Context(), "SELECT count(*), max(version) FROM leaserouter_migrations").Scan(&n, &v))
	require.Equal(t, 3, n)
	require.Equal(t, 3, v)
}

// TestLifecycle: enqueue, lease, complete; the lease's token is above the
// Unix time in nanoseconds; a second Complete is refused as completed.
func TestLifecycle(t *testing.T) {
	before := time.Now()
	r, _ := newRouter[map[string]int](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", map[string]int{"n": 7}))
	l, err := r.TryAcquire(ctx, "w1")
	require.NoError(t, err)
	require.Equal(t, "a", l.JobID)
	require.Equal(t, map[string]int{"n": 7}, l.Payload)
	require.Equal(t, 1, l.Attempt)
	require.Equal(t, "w1", l.WorkerID)
	require.Greater(t, uint64(l.Token), uint64(before.UnixNano()))
	require.WithinDuration(t, time.Now().Add(leaserouter.DefaultLeaseDuration), l.Expiry(), 5*time.Second)

	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StateLeased, j.State)
	require.Equal(t, l.Token, j.Token)
	require.Equal(t, "w1", j.Owner)

	require.NoError(t, l.Complete(ctx))
	j, ok, err = r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StateSucceeded, j.State)

	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(ctx), &lost)
	require.Equal(t, leaserouter.LostCompleted, lost.Reason)
	require.Equal(t, l.Token, lost.Current)

	_, err = r.TryAcquire(ctx, "w1")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, s.Succeeded)
	require.EqualValues(t, 1, s.Enqueued)
	require.EqualValues(t, 1, s.LeasesGranted)
	require.EqualValues(t, 1, s.StaleRejections)
}

// TestDuplicates: a known ID is refused until its job is finished and
// past its retention.
func TestDuplicates(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{Retention: -1})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	require.ErrorIs(t, r.Enqueue(ctx, "a", 2), leaserouter.ErrDuplicate)
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.ErrorIs(t, r.Enqueue(ctx, "a", 3), leaserouter.ErrDuplicate)
	require.NoError(t, l.Complete(ctx))
	_, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, ok, "Retention < 0: dropped at once")
	require.NoError(t, r.Enqueue(ctx, "a", 4))
	l2, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 4, l2.Payload)
	require.Equal(t, 1, l2.Attempt, "a new job")
	require.Greater(t, l2.Token, l.Token)

	dups, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[int]{{ID: "b"}, {ID: "a"}, {ID: "c"}, {ID: "b"}})
	require.NoError(t, err)
	require.Equal(t, []int{1, 3}, dups)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, s.Enqueued)
	require.EqualValues(t, 4, s.Duplicates)
}

// TestOrder: higher priority first, then ready time, then enqueue order;
// a batch's tokens increase in the order of its leases.
func TestOrder(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	_, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[int]{
		{ID: "low", Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(-1)}},
		{ID: "first"}, {ID: "second"},
		{ID: "high", Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(5)}},
		{ID: "third"},
	})
	require.NoError(t, err)
	ls, err := r.TryAcquireMany(ctx, "w", 10)
	require.NoError(t, err)
	var got []string
	for i, l := range ls {
		got = append(got, l.JobID)
		if i > 0 {
			require.Greater(t, l.Token, ls[i-1].Token)
		}
	}
	require.Equal(t, []string{"high", "first", "second", "third", "low"}, got)
}

// TestExpiryInDatabaseTime: a lease not heartbeated is lost at its expiry
// on the database's clock: refused as expired, the job leased again with
// a newer token, and the stale holder refused as superseded.
func TestExpiryInDatabaseTime(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 150 * time.Millisecond, MaxAttempts: 3})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	l, err := r.TryAcquire(ctx, "w1")
	require.NoError(t, err)
	require.NoError(t, l.Heartbeat(ctx, []byte("half")))
	awaitDBTime(t, db, l.Expiry())

	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Heartbeat(ctx, nil), &lost)
	require.Equal(t, leaserouter.LostExpired, lost.Reason)

	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StatePending, j.State, "settled by the refusal")
	require.Equal(t, "lease expired", j.LastError)

	l2, err := r.TryAcquire(ctx, "w2")
	require.NoError(t, err)
	require.Equal(t, 2, l2.Attempt)
	require.Greater(t, l2.Token, l.Token)
	require.Equal(t, []byte("half"), l2.Progress, "checkpoint handed to the next attempt")

	require.ErrorAs(t, l.Complete(ctx), &lost)
	require.Equal(t, leaserouter.LostSuperseded, lost.Reason)
	require.Equal(t, l2.Token, lost.Current)
	require.NoError(t, l2.Complete(ctx))
}

// TestExpirySettledByAnyCaller: an abandoned lease is settled by whoever
// looks next, with the outcome of its instant: pending with the expiry as
// ready time, or dead when it was the last attempt.
func TestExpirySettledByAnyCaller(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 100 * time.Millisecond, MaxAttempts: 1})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	awaitDBTime(t, db, l.Expiry())
	_, err := r.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StateFailed, j.State)
	require.Equal(t, "lease expired", j.LastError)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.Expirations)
	require.EqualValues(t, 1, s.Dead)
}

// TestHeartbeat extends the lease, never shortens it, keeps the token.
func TestHeartbeat(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{LeaseDuration: time.Hour})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	first := l.Expiry()
	require.NoError(t, l.Heartbeat(ctx, []byte("p1")))
	require.True(t, l.Expiry().After(first))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []byte("p1"), j.Progress)
	require.Equal(t, l.Token, j.Token)
	require.NoError(t, l.Heartbeat(ctx, nil))
	j, _, err = r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []byte("p1"), j.Progress, "nil progress keeps the checkpoint")
	require.NoError(t, l.Heartbeat(ctx, []byte{}))
	j, _, err = r.Get(ctx, "a")
	require.NoError(t, err)
	require.Empty(t, j.Progress, "empty progress clears it")
}

// TestFail: a failure retries after Backoff, a permanent one or the last
// attempt makes the job dead; Release hands the job back at once.
func TestFail(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{MaxAttempts: 3, Backoff: func(int) time.Duration { return 0 }})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	require.NoError(t, l.Fail(ctx, errors.New("boom")))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StatePending, j.State)
	require.Equal(t, "boom", j.LastError)

	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "a", l.JobID)
	require.Equal(t, 2, l.Attempt)
	require.NoError(t, l.Release(ctx))
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "a", l.JobID)
	require.Equal(t, 3, l.Attempt)
	require.NoError(t, l.Fail(ctx, nil))
	j, _, err = r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, j.State, "attempts exhausted: dead")
	require.Equal(t, "unknown error", j.LastError)

	require.NoError(t, r.Enqueue(ctx, "p", 1))
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "p", l.JobID)
	require.NoError(t, l.Fail(ctx, leaserouter.Permanent(errors.New("bad input"))))
	j, _, err = r.Get(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, j.State, "permanent: dead at once")
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, s.Dead)
	require.EqualValues(t, 1, s.Retries)
}

// TestFailBackoffSchedules: a positive Backoff schedules the retry on the
// database's clock; the job is ready at its run-at.
func TestFailBackoffSchedules(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{Backoff: func(int) time.Duration { return 200 * time.Millisecond }})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	require.NoError(t, l.Fail(ctx, errors.New("later")))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateScheduled, j.State)
	_, err = r.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	awaitDBTime(t, db, j.RunAt)
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 2, l.Attempt)
}

// TestCompleteTx: completion commits with the caller's transaction, and
// the row stays locked until then; a rolled-back CompleteTx leaves the
// lease valid.
func TestCompleteTx(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	_, err := db.Exec(ctx, "CREATE TABLE results (id text PRIMARY KEY, v int)")
	require.NoError(t, err)
	l := leaseOn(t, r, "a")

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, pgrouter.Fence(ctx, tx, "results/a", l.Token))
	_, err = tx.Exec(ctx, "INSERT INTO results VALUES ('a', 1)")
	require.NoError(t, err)
	require.NoError(t, l.CompleteTx(ctx, tx))
	require.NoError(t, tx.Rollback(ctx))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateLeased, j.State, "rolled back: still leased")

	tx, err = db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, pgrouter.Fence(ctx, tx, "results/a", l.Token))
	_, err = tx.Exec(ctx, "INSERT INTO results VALUES ('a', 2)")
	require.NoError(t, err)
	require.NoError(t, l.CompleteTx(ctx, tx))
	require.NoError(t, tx.Commit(ctx))
	j, _, err = r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	var v int
	require.NoError(t, db.QueryRow(ctx, "SELECT v FROM results WHERE id = 'a'").Scan(&v))
	require.Equal(t, 2, v)
}

// TestFence: a token below the key's highest is refused in the database,
// naming the highest, and the transaction stays usable.
func TestFence(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	admit := func(key string, tok leaserouter.Token) error {
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		if err := pgrouter.Fence(ctx, tx, key, tok); err != nil {
			var one int
			require.NoError(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one), "tx usable after a refusal")
			return err
		}
		return tx.Commit(ctx)
	}
	require.NoError(t, admit("k", 10))
	require.NoError(t, admit("k", 10), "equal: the same holder writing again")
	require.NoError(t, admit("k", 12))
	err := admit("k", 11)
	require.ErrorIs(t, err, leaserouter.ErrStaleToken)
	var stale *leaserouter.StaleTokenError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, leaserouter.StaleTokenError{Key: "k", Token: 11, Highest: 12}, *stale)
	require.NoError(t, admit("other", 1), "keys are independent")
	require.ErrorIs(t, pgrouter.Fence(ctx, nil, "k", 1), leaserouter.ErrInvalidOptions)

	// A concurrent Fence on the same key waits for the first transaction,
	// then is refused if its token is lower.
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, pgrouter.Fence(ctx, tx, "k", 20))
	done := make(chan error, 1)
	go func() { done <- admit("k", 15) }()
	select {
	case err := <-done:
		t.Fatalf("Fence did not wait for the key's lock: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, <-done, leaserouter.ErrStaleToken)
}

// TestCancel: a leased job canceled loses its lease at once.
func TestCancel(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	require.NoError(t, r.Enqueue(ctx, "b", 1))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, r.Cancel(ctx, "a"))
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(ctx), &lost)
	require.Equal(t, leaserouter.LostCanceled, lost.Reason)
	require.NoError(t, r.Cancel(ctx, "b"))
	require.NoError(t, r.Cancel(ctx, "b"), "finished: nothing changes")
	j, _, err := r.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateCanceled, j.State)
	require.ErrorIs(t, r.Cancel(ctx, "nope"), leaserouter.ErrNotFound)
	require.ErrorIs(t, r.Cancel(ctx, ""), leaserouter.ErrNotFound)
	_, err = r.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
}

// TestScheduled: a delayed job is ready at its run-at, and a blocked
// Acquire wakes for it by its timer.
func TestScheduled(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{PollInterval: time.Minute})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1, leaserouter.WithDelay(300*time.Millisecond)))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateScheduled, j.State)
	_, err = r.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := r.Acquire(actx, "w")
	require.NoError(t, err, "woken by the timer at the run-at, not the 1-minute poll")
	require.Equal(t, "a", l.JobID)
}

// TestAcquireWokenAcrossRouters: an Acquire blocked in one Router is woken
// by an Enqueue through another (another process, as far as the database
// knows), by NOTIFY: the Acquire is blocked before the job exists (its
// Router listening, so the listener's one wake-up of a new connection is
// behind it), and PollInterval is an hour, so nothing but the
// notification can wake it within the test's bound.
func TestAcquireWokenAcrossRouters(t *testing.T) {
	a, db := newRouter[int](t, pgrouter.Options{PollInterval: time.Hour})
	b := routerOn[int](t, db, pgrouter.Options{PollInterval: time.Hour})
	ctx := t.Context()
	got := make(chan *pgrouter.Lease[int], 1)
	go func() {
		l, err := a.Acquire(ctx, "w")
		if err == nil {
			got <- l
		}
		close(got)
	}()
	eventually(t, 10*time.Second, "a listening, its Acquire blocked", func() bool {
		return pgrouter.Listening(a) && pgrouter.Parked(a) == 1
	})
	require.NoError(t, b.Enqueue(ctx, "j", 1))
	select {
	case l := <-got:
		require.NotNil(t, l)
		require.Equal(t, "j", l.JobID)
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked Acquire was not woken by the other Router's NOTIFY within 10s")
	}
}

// unclosedWithLease returns a Router the test must Close itself, holding
// a lease on job "a".
func unclosedWithLease(t *testing.T) (*pgrouter.Router[int], *pgrouter.Lease[int]) {
	r, err := pgrouter.New[int](t.Context(), pgtest.New(t), pgrouter.Options{})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	l, err := r.TryAcquire(t.Context(), "w")
	require.NoError(t, err)
	return r, l
}

// TestClose: Close refuses new work, wakes blocked Acquires, and revokes
// leases still held when its ctx is done: pending again, the holder
// refused as revoked.
func TestClose(t *testing.T) {
	r, l := unclosedWithLease(t)
	ctx := t.Context()
	blocked := make(chan error, 1)
	go func() {
		_, err := r.Acquire(ctx, "w2")
		blocked <- err
	}()
	eventually(t, 10*time.Second, "the Acquire blocked", func() bool { return pgrouter.Parked(r) == 1 })
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.Close(cctx), context.DeadlineExceeded)
	require.ErrorIs(t, <-blocked, leaserouter.ErrClosed)
	require.ErrorIs(t, r.Enqueue(ctx, "b", 1), leaserouter.ErrClosed)
	_, err := r.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(ctx), &lost)
	require.Equal(t, leaserouter.LostRevoked, lost.Reason)
	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StatePending, j.State)
	require.NoError(t, r.Close(ctx), "again: nil")
}

// TestCloseWakesBlockedAcquires: Close wakes an Acquire blocked before it
// began, which returns ErrClosed: with no lease to revoke (no NOTIFY) and
// PollInterval an hour, only Close's own wake-up can end its wait within
// the test's bound.
func TestCloseWakesBlockedAcquires(t *testing.T) {
	r, err := pgrouter.New[int](t.Context(), pgtest.New(t), pgrouter.Options{PollInterval: time.Hour})
	require.NoError(t, err)
	blocked := make(chan error, 1)
	go func() {
		_, err := r.Acquire(t.Context(), "w")
		blocked <- err
	}()
	eventually(t, 10*time.Second, "the Acquire blocked", func() bool { return pgrouter.Parked(r) == 1 })
	require.NoError(t, r.Close(t.Context()))
	select {
	case err := <-blocked:
		require.ErrorIs(t, err, leaserouter.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake the blocked Acquire within 10s")
	}
}

// TestCloseWaitsForLeases: Close lets held leases finish.
func TestCloseWaitsForLeases(t *testing.T) {
	r, l := unclosedWithLease(t)
	ctx := t.Context()
	closed := make(chan error, 1)
	go func() { closed <- r.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned with a lease held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, l.Heartbeat(ctx, nil), "holders may go on while Close waits")
	require.NoError(t, l.Complete(ctx))
	require.NoError(t, <-closed)
}

// TestTokenFloor: tokens are above TokenFloor, and a later Router with a
// lower floor never lowers the sequence.
func TestTokenFloor(t *testing.T) {
	const floor = leaserouter.Token(1) << 62
	r, db := newRouter[int](t, pgrouter.Options{TokenFloor: floor})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	require.Greater(t, l.Token, floor)
	r2 := routerOn[int](t, db, pgrouter.Options{})
	require.NoError(t, r2.Enqueue(ctx, "b", 1))
	l2, err := r2.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Greater(t, l2.Token, l.Token)
}

// TestCloseEndsAtAbandonedExpiry: Close with a ctx that is never done
// waits for an abandoned lease only until its expiry.
func TestCloseEndsAtAbandonedExpiry(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{LeaseDuration: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	l, err := r.TryAcquire(ctx, "abandoned")
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- r.Close(context.Background()) }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited past the abandoned lease's expiry")
	}
	// Close stops waiting at the expiry as this process proved it (send
	// time + LeaseDuration), a round trip before the database's: what is
	// still valid then is revoked.
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(ctx), &lost)
	require.Contains(t, []leaserouter.LostReason{leaserouter.LostExpired, leaserouter.LostRevoked}, lost.Reason)
}

// TestRetentionAndPurge: a finished job stays for Get and dedup for its
// Retention, then the maintenance loop deletes its row (counted, with an
// event) and its ID may be enqueued again.
func TestRetentionAndPurge(t *testing.T) {
	var purged atomic.Int64
	r, db := newRouter[int](t, pgrouter.Options{Retention: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		OnEvent: func(e leaserouter.Event) {
			if e.Kind == leaserouter.EventPurged && e.JobID == "a" {
				purged.Add(1)
			}
		}})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	require.NoError(t, l.Complete(ctx))
	require.ErrorIs(t, r.Enqueue(ctx, "a", 2), leaserouter.ErrDuplicate, "within its retention")
	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	eventually(t, 10*time.Second, "the row purged", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE id = 'a'").Scan(&n))
		return n == 0
	})
	_, ok, err = r.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, ok)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.Purged)
	require.NoError(t, r.Enqueue(ctx, "a", 3), "past its retention: a new job")
	require.NoError(t, r.Close(ctx))
	require.EqualValues(t, 1, purged.Load(), "one purged event")
}
