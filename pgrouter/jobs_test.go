package pgrouter_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
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

// TestGetOnLastConnection: Get, settling an expired lease, gives its
// connection back before it notifies: on a pool of one it does not wait
// for itself.
func TestGetOnLastConnection(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	cfg.MaxConns = 1
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close) // after the Router's Close
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 50 * time.Millisecond, PollInterval: time.Hour})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	awaitDBTime(t, base, l.Expiry())
	// A wait for a connection (its own, not given back) would last until
	// cctx's end.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, ok, err := r.Get(cctx, "a")
	t.Logf("Get: %v %v %v", j.State, ok, err)
	require.NoError(t, err)
	require.NoError(t, cctx.Err(), "Get waited for the connection it had not given back")
}
