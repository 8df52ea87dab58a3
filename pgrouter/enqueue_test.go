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
