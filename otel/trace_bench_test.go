package otel_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
)

// discard is a SpanExporter that drops every span: the SDK's whole cost
// (sampling, recording, the batch processor's queue) without an export.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracing is the tracing middleware's cost per job against
// Router.Run's per-job time: b.N no-op jobs drained by Run with 2 workers
// (as the root's BenchmarkRun), each attempt through the middleware as a
// Client runs it. ns/op is ns per job. Sub-benchmarks:
//
//   - Run: plain Run, jobs without metadata (the baseline);
//   - RunTraceContext: plain Run, jobs carrying a traceparent (what the
//     metadata alone costs);
//   - Noop: the middleware with the no-op TracerProvider;
//   - NoopBare: the same, jobs without metadata (the span's parent is
//     then looked up in the handler's ctx, which Run makes on that first
//     ask: what any middleware reading its ctx pays);
//   - SDK: the middleware with the SDK, AlwaysSample, and a batch
//     processor into an exporter that discards.
//
// In the others, jobs are enqueued with WithTraceContext from a
// sampled span. Run the binary several times with -count 1, so the
// variants alternate on a noisy machine.
func BenchmarkTracing(b *testing.B) {
	for _, v := range []struct {
		name  string
		trace bool // enqueue with a traceparent
		mw    func(b *testing.B) leaserouter.Middleware
	}{
		{"Run", false, nil},
		{"RunTraceContext", true, nil},
		{"Noop", true, func(*testing.B) leaserouter.Middleware {
			return lrotel.NewTracingMiddleware(noop.NewTracerProvider(), lrotel.TracingOptions{})
		}},
		{"NoopBare", false, func(*testing.B) leaserouter.Middleware {
			return lrotel.NewTracingMiddleware(noop.NewTracerProvider(), lrotel.TracingOptions{})
		}},
		{"SDK", true, func(b *testing.B) leaserouter.Middleware {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			return lrotel.NewTracingMiddleware(tp, lrotel.TracingOptions{})
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			var mw leaserouter.Middleware
			if v.mw != nil {
				mw = v.mw(b)
			}
			benchRun(b, v.trace, mw)
		})
	}
}

// benchRun drains b.N jobs with Run, each through mw when it is not nil.
func benchRun(b *testing.B, withTrace bool, mw leaserouter.Middleware) {
	r, err := leaserouter.New[int](leaserouter.Options{Retention: -1, LeaseDuration: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close(context.Background()) })
	var opt []leaserouter.EnqueueOption
	if withTrace {
		// A sampled span's context, as an upstream service's would be.
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		ctx, span := tp.Tracer("enqueue").Start(context.Background(), "enqueue", trace.WithSpanKind(trace.SpanKindProducer))
		opt = append(opt, lrotel.WithTraceContext(ctx))
		span.End()
	}
	for i := range b.N {
		if err := r.Enqueue(fmt.Sprint("j", i), i, opt...); err != nil {
			b.Fatal(err)
		}
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := func(context.Context) error {
		if left.Add(-1) == 0 {
			cancel()
		}
		return nil
	}
	h := func(ctx context.Context, _ *leaserouter.Lease[int]) error { return done(ctx) }
	if mw != nil {
		h = func(ctx context.Context, l *leaserouter.Lease[int]) error {
			a := leaserouter.Attempt{Queue: leaserouter.DefaultQueue, JobID: l.JobID, Attempt: l.Attempt, Token: l.Token, Metadata: l.Metadata()}
			return mw(ctx, a, done)
		}
	}
	runtime.GC() // collect the setup's garbage now, not while timing
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	err = r.Run(ctx, leaserouter.WorkerOptions{Workers: 2, HeartbeatInterval: 100 * time.Millisecond}, h)
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
}

// BenchmarkTracingMiddleware is the middleware alone, around a next that
// does nothing, for an attempt whose job carries a traceparent: its own
// cost, without Run's (ns/op is per attempt).
func BenchmarkTracingMiddleware(b *testing.B) {
	src := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	ctx, span := src.Tracer("enqueue").Start(context.Background(), "enqueue")
	span.End()
	r, err := leaserouter.New[int](leaserouter.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(context.Background())
	if err := r.Enqueue("j", 1, lrotel.WithTraceContext(ctx)); err != nil {
		b.Fatal(err)
	}
	j, _ := r.Get("j")
	a := leaserouter.Attempt{Queue: leaserouter.DefaultQueue, JobID: "j", Attempt: 1, Metadata: j.Metadata}
	next := func(context.Context) error { return nil }
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
	defer sdk.Shutdown(context.Background())
	for _, v := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"Noop", noop.NewTracerProvider()}, {"SDK", sdk}} {
		b.Run(v.name, func(b *testing.B) {
			mw := lrotel.NewTracingMiddleware(v.tp, lrotel.TracingOptions{})
			b.ReportAllocs()
			for b.Loop() {
				_ = mw(context.Background(), a, next)
			}
		})
	}
}
