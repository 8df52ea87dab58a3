package pgrouter_test

// Rules pgrouter shares with the core through internal/contract, each
// tested here and, under the same name, in the core's contract_test.go,
// so the two backends give one answer (the conformance suite,
// internal/routertest, takes them as rows).

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// eventBacklog is DESIGN's bound, written out: a test using the package's
// own constant would follow it if it changed.
const eventBacklog = 16384

// TestEventBacklogIs16384: with the hook stuck, producers of new work go
// on until 16384 events are undelivered (the one in the hook and the rest
// of its batch included), and wait from there.
func TestEventBacklogIs16384(t *testing.T) {
	open := make(chan struct{})
	r, _ := newRouter[int](t, pgrouter.Options{OnEvent: func(leaserouter.Event) { <-open }})
	defer close(open) // before the cleanup's Close, which waits for delivery
	enqueueJobs(t, r, "j", eventBacklog-1)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Enqueue(ctx, "last", 0), "the 16384th event has room")
	short, cancelShort := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancelShort()
	require.ErrorIs(t, r.Enqueue(short, "over", 0), context.DeadlineExceeded, "the 16385th waits for room")
	_, found, err := r.Get(t.Context(), "over")
	require.NoError(t, err)
	require.False(t, found, "a producer held for room has not enqueued")
}
