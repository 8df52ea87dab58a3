package otel_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
)

// BenchmarkTracingClient is the tracing figure through a Client: b.N
// no-op jobs of one kind drained by a core Client (one queue, Workers 2),
// with no middleware (Client), and with the tracing middleware (Noop,
// SDK as in BenchmarkTracing), jobs enqueued with WithTraceContext from a
// sampled span; BenchmarkTracing/Run is the Router.Run baseline. ns/op is
// ns per job, from Start to Drained.
func BenchmarkTracingClient(b *testing.B) {
	for _, v := range []struct {
		name string
		mw   func(b *testing.B) leaserouter.Middleware
	}{
		{"Client", nil},
		{"Noop", func(*testing.B) leaserouter.Middleware {
			return lrotel.NewTracingMiddleware(noop.NewTracerProvider(), lrotel.TracingOptions{})
		}},
		{"SDK", func(b *testing.B) leaserouter.Middleware {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			return lrotel.NewTracingMiddleware(tp, lrotel.TracingOptions{})
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			var mw []leaserouter.Middleware
			if v.mw != nil {
				mw = append(mw, v.mw(b))
			}
			c, err := leaserouter.NewClient(leaserouter.ClientOptions{
				Options:    leaserouter.Options{Retention: -1, LeaseDuration: time.Second},
				Queues:     map[string]leaserouter.QueueConfig{leaserouter.DefaultQueue: {Workers: 2}},
				Middleware: mw,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Stop(context.Background())
			k, err := leaserouter.Register(c, "noop", func(context.Context, *leaserouter.Lease[int]) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
			ctx, span := tp.Tracer("enqueue").Start(context.Background(), "enqueue", trace.WithSpanKind(trace.SpanKindProducer))
			opt := lrotel.WithTraceContext(ctx)
			span.End()
			for i := range b.N {
				if err := k.Enqueue(context.Background(), fmt.Sprint("j", i), i, opt); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			if err := c.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			if err := c.Drained(context.Background()); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
		})
	}
}
