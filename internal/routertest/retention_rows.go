package routertest

import (
	"context"
	"sync"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// rowRunDropsAtOnce: at Retention < 0 a job Run
// completes is dropped at once, as one completed by Lease.Complete is
// (rowDedup): Get finds nothing, its ID may be enqueued again, Stats
// counts it purged and not succeeded, and its events are Completed then
// Purged, at the same instant.
var rowRunDropsAtOnce = Row{Name: "dedup/Retention < 0: a job Run completes is dropped at once", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{Retention: -1, OnEvent: ev.record})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", "1"))
	ran := make(chan string, 1)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() {
		_ = b.Run(runCtx, leaserouter.WorkerOptions{Workers: 1}, func(_ context.Context, l Lease) error {
			ran <- l.JobID()
			return nil
		})
	})
	var evs []leaserouter.Event
	eventually(t, h, "Run completes a", func() bool {
		evs = append(evs, ev.drain()...)
		for _, e := range evs {
			if e.Kind == leaserouter.EventPurged && e.JobID == "a" {
				return true
			}
		}
		return false
	})
	stop()
	wg.Wait()
	require.Equal(t, "a", <-ran)
	var kinds []leaserouter.EventKind
	var completed, purged leaserouter.Event
	for _, e := range evs {
		if e.JobID != "a" {
			continue
		}
		kinds = append(kinds, e.Kind)
		switch e.Kind {
		case leaserouter.EventCompleted:
			completed = e
		case leaserouter.EventPurged:
			purged = e
		}
	}
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired,
		leaserouter.EventCompleted, leaserouter.EventPurged}, kinds)
	require.True(t, completed.Time.Equal(purged.Time), "purged at the completion: %v, %v", completed.Time, purged.Time)
	_, ok, err := b.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, ok, "Retention < 0: dropped at once")
	s := stats(t, b)
	require.EqualValues(t, 1, s.Purged)
	require.Zero(t, s.Succeeded)
	require.NoError(t, b.Enqueue(ctx, "a", "2"), "a dropped ID may be enqueued again")
}}
