package prometheus_test

import (
	"context"
	"fmt"
	"net/http"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leaserouter/leaserouter"
	lrprom "github.com/leaserouter/leaserouter/prometheus"
)

// The three steps of wiring: the Collector's hook into Options, Observe
// the Router, register the Collector. Serving it is promhttp's business.
func Example() {
	c := lrprom.NewCollector(lrprom.Options{})
	r, err := leaserouter.New[string](leaserouter.Options{OnEvent: c.OnEvent})
	if err != nil {
		panic(err)
	}
	c.Observe(r)
	reg := prom.NewRegistry()
	reg.MustRegister(c)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	_ = r.Enqueue("job-1", "payload")
	l, _ := r.TryAcquire("worker-1")
	_ = l.Complete()
	_ = r.Close(context.Background()) // every event delivered

	families, _ := reg.Gather()
	for _, f := range families {
		switch m := f.GetMetric()[0]; f.GetName() {
		case "leaserouter_enqueued_total", "leaserouter_leases_granted_total":
			fmt.Println(f.GetName(), m.GetCounter().GetValue())
		case "leaserouter_run_seconds":
			fmt.Println(f.GetName(), "count", m.GetHistogram().GetSampleCount())
		}
	}
	// Output:
	// leaserouter_enqueued_total 1
	// leaserouter_leases_granted_total 1
	// leaserouter_run_seconds count 1
}
