package pgrouter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

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
