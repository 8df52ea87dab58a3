package pgrouter_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

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
