package pgrouter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

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
