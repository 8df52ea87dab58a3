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

// TestGetOfALeasedRowWithoutAnExpiryIsNoPanic: a leased row whose
// lease_expires_at is NULL (only a row written by hand has one) reads
// back with a zero LeaseExpiry, in Get and List, never a panic.
func TestGetOfALeasedRowWithoutAnExpiryIsNoPanic(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{PollInterval: time.Hour})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	_, err := db.Exec(ctx, `UPDATE leaserouter_jobs SET state = 'leased', token = 7, lease_expires_at = NULL WHERE id = 'a'`)
	require.NoError(t, err)
	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, j.LeaseExpiry.IsZero())
	page, err := r.List(ctx, leaserouter.ListParams{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
}
