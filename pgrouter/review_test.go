package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
	_, err = stall.Exec(ctx, "ALTER SEQUENCE leaserouter_token CACHE 1") // nextval waits for it
	require.NoError(t, err)
	claimed := make(chan error, 1)
	go func() {
		_, err := r.TryAcquire(ctx, "w")
		claimed <- err
	}()
	eventually(t, 10*time.Second, "claim waiting on the sequence", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%nextval%'`).Scan(&n))
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

// TestCompleteTxOnLastConnection: an expired lease's CompleteTx, in a
// transaction holding the pool's only connection, is refused at once (it
// does not wait for a connection to settle the job).
func TestCompleteTxOnLastConnection(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	cfg.MaxConns = 1
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer db.Close()
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 50 * time.Millisecond})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	awaitDBTime(t, base, l.Expiry())
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// A wait for a connection (the caller's tx holds the only one) would
	// last until cctx's end.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.CompleteTx(cctx, tx), &lost)
	require.Equal(t, leaserouter.LostExpired, lost.Reason)
	require.NoError(t, cctx.Err(), "it waited for a connection the caller's tx holds")
}

// TestUndecodablePayload: a job whose payload this Router cannot decode
// fails its attempt; the other jobs of the batch are returned, their
// attempts untouched.
func TestUndecodablePayload(t *testing.T) {
	ints, db := newRouter[int](t, pgrouter.Options{MaxAttempts: 1})
	strs := routerOn[string](t, db, pgrouter.Options{MaxAttempts: 1})
	ctx := t.Context()
	require.NoError(t, ints.Enqueue(ctx, "good1", 1))
	require.NoError(t, strs.Enqueue(ctx, "bad", "not an int"))
	require.NoError(t, ints.Enqueue(ctx, "good2", 2))
	ls, err := ints.TryAcquireMany(ctx, "w", 10)
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, "good1", ls[0].JobID)
	require.Equal(t, "good2", ls[1].JobID)
	j, _, err := ints.Get(ctx, "good2")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateLeased, j.State)
	js, _, err := strs.Get(ctx, "bad")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, js.State, "its one attempt failed")
	require.Contains(t, js.LastError, "does not decode")
}

// TestLongBackoff: a Backoff past 2^31 microseconds (36 minutes)
// schedules the retry.
func TestLongBackoff(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{Backoff: func(int) time.Duration { return time.Hour }})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	require.NoError(t, l.Fail(ctx, errors.New("later")))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateScheduled, j.State)
	require.WithinDuration(t, time.Now().Add(time.Hour), j.RunAt, time.Minute)
}

// TestEnqueueManyOverlappingBatches: concurrent batches sharing IDs, in
// opposite orders, never deadlock; each ID is enqueued once.
func TestEnqueueManyOverlappingBatches(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	ids := make([]leaserouter.JobSpec[int], 300)
	for i := range ids {
		ids[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i)}
	}
	rev := make([]leaserouter.JobSpec[int], len(ids))
	for i := range ids {
		rev[i] = ids[len(ids)-1-i]
	}
	var wg sync.WaitGroup
	errs := make([]error, 12)
	dups := make([]int, 12)
	for g := range errs {
		wg.Go(func() {
			batch := ids
			if g%2 == 1 {
				batch = rev
			}
			d, err := r.EnqueueMany(ctx, batch)
			errs[g], dups[g] = err, len(d)
		})
	}
	wg.Wait()
	total := 0
	for g := range errs {
		require.NoError(t, errs[g])
		total += len(ids) - dups[g]
	}
	require.Equal(t, len(ids), total, "each ID enqueued once")
}

// TestNULPayload: a payload jsonb cannot store is ErrInvalidJob, with its
// batch index; an escaped backslash before "u0000" is fine.
func TestNULPayload(t *testing.T) {
	r, _ := newRouter[string](t, pgrouter.Options{})
	ctx := t.Context()
	require.ErrorIs(t, r.Enqueue(ctx, "a", "x\x00y"), leaserouter.ErrInvalidJob)
	_, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "b", Payload: "ok"}, {ID: "c", Payload: "\x00"}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, "batch index 1")
	require.NoError(t, r.Enqueue(ctx, "d", `\u0000`))
	j, _, err := r.Get(ctx, "d")
	require.NoError(t, err)
	require.Equal(t, `\u0000`, j.Payload)
}

// TestRevokeLastAttempt: Close revoking a lease on a job's last attempt
// makes the job dead, so no Router grants it an attempt beyond its max.
func TestRevokeLastAttempt(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{MaxAttempts: 1})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	_, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, r.Close(done), context.Canceled)
	other := routerOn[int](t, db, pgrouter.Options{MaxAttempts: 1})
	_, err = other.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	j, _, err := other.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, j.State)
}

// TestAcquireWokenForScheduledJob: an Acquire already waiting takes a
// job scheduled after it began waiting at the job's run-at, not at its
// next poll.
func TestAcquireWokenForScheduledJob(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{PollInterval: time.Minute})
	ctx := t.Context()
	got := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := r.Acquire(actx, "w")
		got <- err
	}()
	// Enqueued until the waiter is listening and takes one.
	for i := 0; ; i++ {
		require.NoError(t, r.Enqueue(ctx, fmt.Sprint("j", i), i, leaserouter.WithDelay(200*time.Millisecond)))
		select {
		case err := <-got:
			require.NoError(t, err)
			return
		case <-time.After(2 * time.Second):
		}
		require.Less(t, i, 5, "the waiter never took a scheduled job before its poll")
	}
}

// TestNotifyOnScheduled: enqueueing a scheduled job, and a retry
// scheduled by Fail, notify the queue's listeners (their waiters take the
// new due instant for their timers).
func TestNotifyOnScheduled(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{Backoff: func(int) time.Duration { return time.Hour }})
	ctx := t.Context()
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN leaserouter")
	require.NoError(t, err)
	expect := func(what string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(wctx)
		require.NoError(t, err, what)
		require.Equal(t, pgrouter.DefaultQueue, n.Payload)
	}
	require.NoError(t, r.Enqueue(ctx, "later", 1, leaserouter.WithDelay(time.Hour)))
	expect("scheduled enqueue")
	require.NoError(t, r.Enqueue(ctx, "now", 1))
	expect("pending enqueue")
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(ctx, errors.New("retry in an hour")))
	expect("scheduled retry")
}

// TestRefusalReasonAfterLockWait: an operation that waited for the row
// while another transaction completed the lease reports "completed".
func TestRefusalReasonAfterLockWait(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, l.CompleteTx(ctx, tx))
	hb := make(chan error, 1)
	go func() { hb <- l.Heartbeat(ctx, nil) }()
	select {
	case err := <-hb:
		t.Fatalf("Heartbeat did not wait for the row: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, <-hb, &lost)
	require.Equal(t, leaserouter.LostCompleted, lost.Reason)
}

// TestCancelSettlesFirst: canceling a job whose last lease has expired
// finds it dead, as settling at the expiry made it.
func TestCancelSettlesFirst(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 50 * time.Millisecond, MaxAttempts: 1, PollInterval: time.Hour})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	awaitDBTime(t, db, l.Expiry())
	require.NoError(t, r.Cancel(ctx, "a"))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, j.State)
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(ctx), &lost)
	require.Equal(t, leaserouter.LostExpired, lost.Reason)
}

// TestExpiryCheckedAtTheLock: an operation waiting for a row another
// transaction only locked (SELECT ... FOR UPDATE) past the lease's expiry
// is refused as expired: its clock is read with the lock held.
func TestExpiryCheckedAtTheLock(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 200 * time.Millisecond, PollInterval: time.Hour})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT FROM leaserouter_jobs WHERE id = 'a' FOR UPDATE")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- l.Complete(ctx) }()
	awaitDBTime(t, db, l.Expiry())
	require.NoError(t, tx.Rollback(ctx))
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, <-done, &lost)
	require.Equal(t, leaserouter.LostExpired, lost.Reason)
}
