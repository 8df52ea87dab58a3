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
