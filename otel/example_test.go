package otel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
)

// Wiring with any MeterProvider (here the SDK's, with a ManualReader to
// show what a collection holds; in a service, the one your exporter uses).
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := lrotel.New(mp, lrotel.Options{})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	r, err := leaserouter.New[string](leaserouter.Options{OnEvent: m.OnEvent})
	if err != nil {
		panic(err)
	}
	m.Observe(r)

	_ = r.Enqueue("job-1", "payload")
	l, _ := r.TryAcquire("worker-1")
	_ = l.Complete()
	_ = r.Close(context.Background()) // every event delivered

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			switch d := x.Data.(type) {
			case metricdata.Sum[int64]:
				if x.Name == "leaserouter.leases.granted" || x.Name == "messaging.client.consumed.messages" {
					fmt.Println(x.Name, d.DataPoints[0].Value)
				}
			case metricdata.Histogram[float64]:
				if x.Name == "messaging.process.duration" {
					fmt.Println(x.Name, "count", d.DataPoints[0].Count)
				}
			}
		}
	}
	// Unordered output:
	// leaserouter.leases.granted 1
	// messaging.client.consumed.messages 1
	// messaging.process.duration count 1
}
