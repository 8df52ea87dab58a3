package pgrouter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestFence: a token below the key's highest is refused in the database,
// naming the highest, and the transaction stays usable.
func TestFence(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	admit := func(key string, tok leaserouter.Token) error {
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		if err := pgrouter.Fence(ctx, tx, key, tok); err != nil {
			var one int
			require.NoError(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one), "tx usable after a refusal")
			return err
		}
		return tx.Commit(ctx)
	}
	require.NoError(t, admit("k", 10))
	require.NoError(t, admit("k", 10), "equal: the same holder writing again")
	require.NoError(t, admit("k", 12))
	err := admit("k", 11)
	require.ErrorIs(t, err, leaserouter.ErrStaleToken)
	var stale *leaserouter.StaleTokenError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, leaserouter.StaleTokenError{Key: "k", Token: 11, Highest: 12}, *stale)
	require.NoError(t, admit("other", 1), "keys are independent")
	require.ErrorIs(t, pgrouter.Fence(ctx, nil, "k", 1), leaserouter.ErrInvalidOptions)

	// A concurrent Fence on the same key waits for the first transaction,
	// then is refused if its token is lower.
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, pgrouter.Fence(ctx, tx, "k", 20))
	done := make(chan error, 1)
	go func() { done <- admit("k", 15) }()
	select {
	case err := <-done:
		t.Fatalf("Fence did not wait for the key's lock: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, <-done, leaserouter.ErrStaleToken)
}
