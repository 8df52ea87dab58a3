package otel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	lrotel "github.com/leaserouter/leaserouter/otel"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestMetricsObservePgrouterRouter: a pgrouter Router is observed as a
// core one is, its queue named by its Options.Queue, its figures read
// from the database at collection.
func TestMetricsObservePgrouterRouter(t *testing.T) {
	ctx := context.Background()
	r, err := pgrouter.New[int](ctx, pgtest.New(t), pgrouter.Options{Queue: "mail"})
	require.NoError(t, err)
	defer r.Close(ctx)
	reader := sdkmetric.NewManualReader()
	m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), lrotel.Options{})
	require.NoError(t, err)
	defer m.Close()
	m.Observe(r)
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	require.NoError(t, r.Enqueue(ctx, "b", 2))
	got := collect(t, reader)
	require.Equal(t, map[string]int64{"mail": 2}, got.byQueue(t, "leaserouter.jobs.enqueued"))
	require.EqualValues(t, 2, got.byQueue(t, "leaserouter.jobs")["mail/pending"])
}
