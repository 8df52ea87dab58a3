package pgrouter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestHistoryCountsEveryProcess: History sums what every process on the
// queue counted in the current minute of the database's clock:
// completions, failed attempts, deaths, stale refusals, whether or not a
// hook is set.
func TestHistoryCountsEveryProcess(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{MaxAttempts: 1})
	other := routerOn[int](t, db, pgrouter.Options{MaxAttempts: 1, OnEvent: func(leaserouter.Event) {}})
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c", "d"} {
		require.NoError(t, r.Enqueue(ctx, id, 1))
	}
	run := func(rt *pgrouter.Router[int], n int) { // Run completes n jobs
		ctx, cancel := context.WithCancel(ctx)
		done := 0
		require.NoError(t, rt.Run(ctx, leaserouter.WorkerOptions{Workers: 1, Batch: 1}, func(context.Context, *pgrouter.Lease[int]) error {
			if done++; done == n {
				cancel()
			}
			return nil
		}))
	}
	run(r, 1)     // no hook: counted all the same
	run(other, 1) // another process, with a hook
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(ctx, nil)) // one attempt: failed, then dead
	stale, err := other.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, r.Cancel(ctx, stale.JobID))
	require.ErrorIs(t, stale.Complete(ctx), leaserouter.ErrLeaseLost)
	eventually(t, 10*time.Second, "every process's counts in the table", func() bool {
		h, err := r.History(ctx)
		require.NoError(t, err)
		require.Len(t, h, leaserouter.HistoryMinutes)
		var sum leaserouter.Minute
		for _, m := range h {
			sum.Completed += m.Completed
			sum.Failed += m.Failed
			sum.Dead += m.Dead
			sum.StaleRejected += m.StaleRejected
		}
		return sum == leaserouter.Minute{Completed: 2, Failed: 1, Dead: 1, StaleRejected: 1}
	})
	h, err := other.History(ctx)
	require.NoError(t, err)
	last := h[len(h)-1].Start
	require.WithinDuration(t, time.Now(), last, 2*time.Minute, "the last minute is the database's current one")
	require.Equal(t, time.Minute, last.Sub(h[len(h)-2].Start))
}
