package pgrouter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

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

// TestConnectionDroppedMidCall: the server ends a Complete's connection
// while the statement waits; the call returns the driver's error (not a
// success it cannot prove), nothing changed, and the lease still
// completes on a retry.
func TestConnectionDroppedMidCall(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: time.Hour})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	blocker, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(ctx, "SELECT FROM leaserouter_jobs WHERE id = 'a' FOR UPDATE")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- l.Complete(ctx) }()
	var pid int
	eventually(t, 10*time.Second, "Complete waiting for the row", func() bool {
		err := db.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%leaserouter_jobs%'`).Scan(&pid)
		return err == nil
	})
	var killed bool
	require.NoError(t, db.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&killed))
	require.True(t, killed)
	err = <-done
	require.Error(t, err)
	require.NotErrorIs(t, err, leaserouter.ErrLeaseLost, "a dropped connection is not a lost lease")
	require.NoError(t, blocker.Rollback(ctx))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateLeased, j.State, "nothing changed")
	require.NoError(t, l.Complete(ctx), "the lease is still valid: a retry completes it")
}
