package otel_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// BenchmarkTracingPG is BenchmarkTracing on pgrouter: b.N no-op jobs
// drained by a pgrouter Router's Run (2 workers, the default Batch, a
// fresh database per sub-benchmark), plain (Run) and with each attempt
// through the tracing middleware (Noop, SDK as in BenchmarkTracing).
// ns/op is ns per job. The jobs carry no traceparent; reading one costs
// the middleware tens of ns (see BenchmarkTracingMiddleware), against
// tens of µs a job here. It needs
// PostgreSQL (pgtest); run the binary several times with -count 1, so
// the variants alternate.
func BenchmarkTracingPG(b *testing.B) {
	for _, v := range []struct {
		name string
		mw   func(b *testing.B) leaserouter.Middleware
	}{
		{"Run", nil},
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
			var mw leaserouter.Middleware
			if v.mw != nil {
				mw = v.mw(b)
			}
			benchRunPG(b, mw)
		})
	}
}

// benchRunPG drains b.N jobs with a pgrouter Router's Run, each through
// mw when it is not nil.
func benchRunPG(b *testing.B, mw leaserouter.Middleware) {
	ctx := context.Background()
	r, err := pgrouter.New[int](ctx, pgtest.New(b), pgrouter.Options{Retention: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	specs := make([]leaserouter.JobSpec[int], 0, 1000)
	for i := range b.N {
		specs = append(specs, leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i), Payload: i})
		if len(specs) == cap(specs) || i == b.N-1 {
			if _, err := r.EnqueueMany(ctx, specs); err != nil {
				b.Fatal(err)
			}
			specs = specs[:0]
		}
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := func(context.Context) error {
		if left.Add(-1) == 0 {
			cancel()
		}
		return nil
	}
	h := func(ctx context.Context, _ *pgrouter.Lease[int]) error { return done(ctx) }
	if mw != nil {
		h = func(ctx context.Context, l *pgrouter.Lease[int]) error {
			a := leaserouter.Attempt{Queue: leaserouter.DefaultQueue, JobID: l.JobID, Attempt: l.Attempt, Token: l.Token}
			return mw(ctx, a, done)
		}
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	err = r.Run(runCtx, leaserouter.WorkerOptions{Workers: 2}, h)
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
}
