package otel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
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

// TestEventMeasurementsOfPgrouterRouterCarryItsQueue: what OnEvent
// records from a pgrouter Router's events names the queue of its
// Options.Queue.
func TestEventMeasurementsOfPgrouterRouterCarryItsQueue(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		lrotel.Options{Attributes: []attribute.KeyValue{attribute.String("service", "shop")}})
	require.NoError(t, err)
	defer m.Close()
	r, err := pgrouter.New[int](ctx, pgtest.New(t), pgrouter.Options{Queue: "mail", OnEvent: m.OnEvent})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Complete(ctx))
	require.NoError(t, r.Close(ctx)) // events delivered
	got := collect(t, reader)
	require.Equal(t, map[string]uint64{"mail": 1}, got.histCounts(t, "leaserouter.lease.wait.duration"))
	require.Equal(t, map[string]uint64{"mail": 1}, got.histCounts(t, "messaging.process.duration"))
}
