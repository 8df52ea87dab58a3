package otel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
)

// A job's attempt continues the trace of the request that enqueued it:
// WithTraceContext stores the span's context with the job, and the
// tracing middleware makes the attempt's span its child. A Client runs
// its ClientOptions.Middleware around every attempt; here the middleware
// is called by hand around a leased job.
func ExampleNewTracingMiddleware() {
	rec := tracetest.NewSpanRecorder() // in a service: the TracerProvider your exporter uses
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mw := lrotel.NewTracingMiddleware(tp, lrotel.TracingOptions{})
	r, err := leaserouter.New[string](leaserouter.Options{})
	if err != nil {
		panic(err)
	}
	defer r.Close(context.Background())

	ctx, request := tp.Tracer("app").Start(context.Background(), "POST /signup")
	_ = r.Enqueue("welcome-1", "ada@example.com", lrotel.WithTraceContext(ctx))
	request.End()

	l, _ := r.TryAcquire("worker-1")
	a := leaserouter.Attempt{Queue: leaserouter.DefaultQueue, JobID: l.JobID, Attempt: l.Attempt, Token: l.Token, Metadata: l.Metadata()}
	_ = mw(context.Background(), a, func(ctx context.Context) error { return l.Complete() })

	attempt := rec.Ended()[1]
	fmt.Println(attempt.Name(), attempt.SpanKind())
	fmt.Println("child of the request:", attempt.Parent().SpanID() == request.SpanContext().SpanID())
	// Output:
	// process default consumer
	// child of the request: true
}
