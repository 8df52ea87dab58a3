package routertest

// Rows for event delivery, on every backend: the backlog's bound and its
// wait (contract.EventBacklog, BacklogFull, BacklogDrained), a hook
// calling back into the router, and the recovery of hooks that panic or
// call runtime.Goexit while the router reports.

import (
	"fmt"
	"sync"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// eventRows are the rows of event delivery.
func eventRows() []Row {
	return []Row{rowBacklogDecidedPerCall}
}

// rowBacklogDecidedPerCall: whether a producer of new work waits is
// decided by the backlog it finds. One that finds 16384 events
// undelivered waits until delivery has brought the backlog down to half;
// one that arrives below the bound goes on, even just after the backlog
// was full and while that first one still waits.
var rowBacklogDecidedPerCall = Row{Name: "events/a producer arriving below the bound goes on, even just after a fill", Test: func(t T, h Harness) {
	pass, free := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(free) }) }
	b := open(t, h, Config{OnEvent: func(leaserouter.Event) {
		select {
		case <-pass:
		case <-free:
		}
	}})
	t.Cleanup(unblock) // before the backend's Close, which waits for delivery
	ctx := ctxOf(t)
	enqueueAllButOne(t, b)
	require.NoError(t, b.Enqueue(ctx, "full", ""), "the 16384th event has room")
	over := make(chan error, 1)
	go func() { over <- b.Enqueue(ctx, "over", "") }()
	h.Advance(h.Lease() / 10)
	notYet(t, over, "the Enqueue that found 16384 undelivered returned")
	// Let 1000 events through the hook: at least 744 of them counted as
	// delivered (the backlog is updated every 256 events and at a batch's
	// end), so the backlog is below the bound and far above half.
	for range 1000 {
		pass <- struct{}{}
	}
	below := make(chan error, 1)
	go func() { below <- b.Enqueue(ctx, "below", "") }()
	require.NoError(t, await(t, h, "the producer arriving below the bound goes on", below))
	notYet(t, over, "the producer that found the bound returned before the backlog was down to half")
	unblock()
	require.NoError(t, await(t, h, "the waiting producer goes on once the backlog is down to half", over))
}}

// enqueueAllButOne enqueues 16383 jobs in one EnqueueMany: with a hook
// stuck on the first event, the backlog is one event short of the bound.
func enqueueAllButOne(t T, b Backend) {
	t.Helper()
	specs := make([]leaserouter.JobSpec[string], eventBacklog-1)
	for i := range specs {
		specs[i].ID = fmt.Sprint("j", i)
	}
	_, err := b.EnqueueMany(ctxOf(t), specs)
	require.NoError(t, err)
}
