package leaserouter

import (
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/hook"
)

// TestBulkActionsHoldTheLockForBoundedChunks: RetryMany and DeleteMany of
// MaxBulkIDs jobs act on at most 256 jobs (bulkChunk) per hold of the
// router's lock (counted between consecutive releases), so a heartbeat waits for
// one chunk, never for the whole call; and every job is acted on.
func TestBulkActionsHoldTheLockForBoundedChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := New[int](Options{MaxAttempts: 1})
		require.NoError(t, err)
		ids := make([]string, MaxBulkIDs)
		for i := range ids {
			ids[i] = strconv.Itoa(i)
			require.NoError(t, r.Enqueue(ids[i], i))
		}
		_, err = r.CancelMany(ids, nil)
		require.NoError(t, err)
		var last, most uint64
		SetHooks(r, &hook.Hooks{
			Unlocking: func() { // r.mu held: the counts are safe to read
				n := r.stats.Retried + r.stats.Purged
				most = max(most, n-last)
				last = n
			},
		})
		res, err := r.RetryMany(ids, []State{StateCanceled})
		require.NoError(t, err)
		require.Equal(t, BulkResult{Done: MaxBulkIDs}, res)
		_, err = r.CancelMany(ids, nil)
		require.NoError(t, err)
		res, err = r.DeleteMany(ids, []State{StateCanceled})
		require.NoError(t, err)
		require.Equal(t, BulkResult{Done: MaxBulkIDs}, res)
		require.Zero(t, r.Stats().Canceled)
		require.Positive(t, most)
		require.LessOrEqual(t, most, uint64(256), "jobs acted on in one hold of the lock")
		require.NoError(t, r.Close(t.Context()))
	})
}
