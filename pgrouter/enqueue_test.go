package pgrouter_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestEnqueueManyOverlappingBatches: concurrent batches sharing IDs, in
// opposite orders, never deadlock; each ID is enqueued once.
func TestEnqueueManyOverlappingBatches(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	ids := make([]leaserouter.JobSpec[int], 300)
	for i := range ids {
		ids[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i)}
	}
	rev := make([]leaserouter.JobSpec[int], len(ids))
	for i := range ids {
		rev[i] = ids[len(ids)-1-i]
	}
	var wg sync.WaitGroup
	errs := make([]error, 12)
	dups := make([]int, 12)
	for g := range errs {
		wg.Go(func() {
			batch := ids
			if g%2 == 1 {
				batch = rev
			}
			d, err := r.EnqueueMany(ctx, batch)
			errs[g], dups[g] = err, len(d)
		})
	}
	wg.Wait()
	total := 0
	for g := range errs {
		require.NoError(t, errs[g])
		total += len(ids) - dups[g]
	}
	require.Equal(t, len(ids), total, "each ID enqueued once")
}

// TestDuplicates: a known ID is refused until its job is finished and
// past its retention.
func TestDuplicates(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{Retention: -1})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	require.ErrorIs(t, r.Enqueue(ctx, "a", 2), leaserouter.ErrDuplicate)
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.ErrorIs(t, r.Enqueue(ctx, "a", 3), leaserouter.ErrDuplicate)
	require.NoError(t, l.Complete(ctx))
	_, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, ok, "Retention < 0: dropped at once")
	require.NoError(t, r.Enqueue(ctx, "a", 4))
	l2, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 4, l2.Payload)
	require.Equal(t, 1, l2.Attempt, "a new job")
	require.Greater(t, l2.Token, l.Token)

	dups, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[int]{{ID: "b"}, {ID: "a"}, {ID: "c"}, {ID: "b"}})
	require.NoError(t, err)
	require.Equal(t, []int{1, 3}, dups)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, s.Enqueued)
	require.EqualValues(t, 4, s.Duplicates)
}
