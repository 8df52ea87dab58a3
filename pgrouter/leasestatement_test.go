package pgrouter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

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
