package otel_test

import (
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
)

// BenchmarkOnEvent is the cost of recording one attempt's events (a
// lease acquired, then completed) of a Client's queue with the SDK's
// MeterProvider: ns/op is per attempt.
func BenchmarkOnEvent(b *testing.B) {
	m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())), lrotel.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	acquired := leaserouter.Event{Kind: leaserouter.EventLeaseAcquired, Queue: "mail", Wait: time.Millisecond}
	completed := leaserouter.Event{Kind: leaserouter.EventCompleted, Queue: "mail", Held: time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		m.OnEvent(acquired)
		m.OnEvent(completed)
	}
}
