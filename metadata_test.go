package leaserouter_test

import (
	"testing"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

// A job's metadata, kind and queue are the conformance suite's rows
// (internal/routertest, metadata_rows.go), run on every backend by
// conformance_test.go. Here, what the core alone has:

// TestRouterQueueStats: a Router reports its one queue, DefaultQueue, to
// a StatsReader.
func TestRouterQueueStats(t *testing.T) {
	r := setup(t, leaserouter.Options{LeaseDuration: ld})
	require.NoError(t, r.Enqueue("a", "p"))
	qs, err := r.QueueStats(t.Context())
	require.NoError(t, err)
	require.Equal(t, []leaserouter.QueueStats{{Queue: leaserouter.DefaultQueue, Stats: r.Stats()}}, qs)
}
