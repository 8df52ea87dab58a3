package prometheus_test

import (
	"testing"
	"time"

	"github.com/leaserouter/leaserouter"
	lrprom "github.com/leaserouter/leaserouter/prometheus"
)

// BenchmarkOnEvent is the cost of recording one attempt's events (a
// lease acquired, then completed) of a Client's queue: ns/op is per
// attempt.
func BenchmarkOnEvent(b *testing.B) {
	c := lrprom.NewCollector(lrprom.Options{})
	acquired := leaserouter.Event{Kind: leaserouter.EventLeaseAcquired, Queue: "mail", Wait: time.Millisecond}
	completed := leaserouter.Event{Kind: leaserouter.EventCompleted, Queue: "mail", Held: time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		c.OnEvent(acquired)
		c.OnEvent(completed)
	}
}
