package otel_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
)

// TestClientAttemptSpansContinueTheEnqueuingTrace: through a Client with
// the tracing middleware, each attempt's span is a child of the span that
// enqueued its job, named for the job's queue, with its kind; a failed
// attempt is an error on its span, and the handler's spans are children
// of the attempt's.
func TestClientAttemptSpansContinueTheEnqueuingTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		c, err := leaserouter.NewClient(leaserouter.ClientOptions{
			Options:    leaserouter.Options{MaxAttempts: 1},
			Queues:     map[string]leaserouter.QueueConfig{"mail": {Workers: 2}, "reports": {Workers: 1}},
			Middleware: []leaserouter.Middleware{lrotel.NewTracingMiddleware(tp, lrotel.TracingOptions{})},
		})
		require.NoError(t, err)
		email, err := leaserouter.Register(c, "email", func(ctx context.Context, l *leaserouter.Lease[string]) error {
			_, s := tp.Tracer("app").Start(ctx, "smtp")
			s.End()
			return nil
		}, leaserouter.WithKindQueue("mail"))
		require.NoError(t, err)
		report, err := leaserouter.Register(c, "report", func(context.Context, *leaserouter.Lease[int]) error {
			return errors.New("no data")
		}, leaserouter.WithKindQueue("reports"))
		require.NoError(t, err)

		ctx, enq := tp.Tracer("app").Start(context.Background(), "POST /signup", trace.WithSpanKind(trace.SpanKindServer))
		require.NoError(t, email.Enqueue(ctx, "welcome", "ada@example.com", lrotel.WithTraceContext(ctx)))
		require.NoError(t, report.Enqueue(ctx, "weekly", 7, lrotel.WithTraceContext(ctx)))
		enq.End()

		require.NoError(t, c.Start(context.Background()))
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, c.Drained(dctx))
		require.NoError(t, c.Stop(context.Background()))

		byName := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			byName[s.Name()] = s
		}
		for name, kind := range map[string]string{"process mail": "email", "process reports": "report"} {
			s := byName[name]
			require.NotNil(t, s, name)
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
			require.Equal(t, enq.SpanContext().SpanID(), s.Parent().SpanID(), name)
			require.Equal(t, enq.SpanContext().TraceID(), s.SpanContext().TraceID(), name)
			require.Equal(t, kind, attrs(s)[lrotel.KindKey].AsString())
		}
		require.Equal(t, codes.Unset, byName["process mail"].Status().Code)
		require.Equal(t, codes.Error, byName["process reports"].Status().Code)
		require.Equal(t, "no data", byName["process reports"].Status().Description)
		require.Equal(t, byName["process mail"].SpanContext().SpanID(), byName["smtp"].Parent().SpanID())
	})
}

// TestMetricsObserveClient: Metrics observes a Client like a Router, one
// series per queue.
func TestMetricsObserveClient(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), lrotel.Options{})
	require.NoError(t, err)
	defer m.Close()
	c, err := leaserouter.NewClient(leaserouter.ClientOptions{
		Options: leaserouter.Options{OnEvent: m.OnEvent},
		Queues:  map[string]leaserouter.QueueConfig{"mail": {}, "reports": {}},
	})
	require.NoError(t, err)
	defer c.Stop(context.Background())
	k, err := leaserouter.Register(c, "email", func(context.Context, *leaserouter.Lease[string]) error { return nil },
		leaserouter.WithKindQueue("mail"))
	require.NoError(t, err)
	m.Observe(c)
	require.NoError(t, k.Enqueue(context.Background(), "a", "x"))
	require.NoError(t, k.Enqueue(context.Background(), "b", "x"))
	require.Equal(t, map[string]int64{"mail": 2, "reports": 0}, collect(t, reader).byQueue(t, "leaserouter.jobs.enqueued"))
}
