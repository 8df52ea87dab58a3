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
