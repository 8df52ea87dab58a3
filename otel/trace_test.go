package otel_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
)

// traced is a core Router whose Run handler goes through the tracing
// middleware, as a Client's attempts do, and the spans it records.
type traced struct {
	r   *leaserouter.Router[string]
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
	mw  leaserouter.Middleware
}

// newTraced makes a Router (Backoff 0, MaxAttempts 2) and a tracer
// provider that records every span.
func newTraced(t *testing.T, opts lrotel.TracingOptions) *traced {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	r, err := leaserouter.New[string](leaserouter.Options{
		LeaseDuration: 10 * time.Second, MaxAttempts: 2, Backoff: func(int) time.Duration { return 0 },
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close(context.Background())) })
	return &traced{r: r, tp: tp, rec: rec, mw: lrotel.NewTracingMiddleware(tp, opts)}
}

// attemptOf is the Attempt a Client hands its middleware for l.
func attemptOf(l *leaserouter.Lease[string]) leaserouter.Attempt {
	return leaserouter.Attempt{
		Kind: "email", Queue: leaserouter.DefaultQueue, JobID: l.JobID,
		Attempt: l.Attempt, Token: l.Token, Metadata: l.Metadata(),
	}
}

// run runs every job now ready through the middleware and h, until none
// is left running, then stops Run. Call it in a bubble.
func (x *traced) run(t *testing.T, h leaserouter.Handler[string]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- x.r.Run(ctx, leaserouter.WorkerOptions{Workers: 1},
			func(ctx context.Context, l *leaserouter.Lease[string]) error {
				return x.mw(ctx, attemptOf(l), func(ctx context.Context) error { return h(ctx, l) })
			})
	}()
	synctest.Wait()
	cancel()
	require.NoError(t, <-errc)
}

// consumerSpans are the ended spans of kind Consumer, in end order.
func (x *traced) consumerSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range x.rec.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// enqueueTraced enqueues id inside a span "enqueue" of tp, with its trace
// context, and returns that span's context.
func enqueueTraced(t *testing.T, x *traced, id string, opts ...leaserouter.EnqueueOption) trace.SpanContext {
	t.Helper()
	ctx, span := x.tp.Tracer("app").Start(context.Background(), "enqueue", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	require.NoError(t, x.r.Enqueue(id, "payload", append(opts, lrotel.WithTraceContext(ctx))...))
	return span.SpanContext()
}

// TestAttemptSpanIsChildOfEnqueuingSpan: the attempt's span continues the
// enqueuing span's trace (its parent, and a link to it), is a consumer
// span named for the queue with the messaging attributes, and the
// handler's own spans are its children.
func TestAttemptSpanIsChildOfEnqueuingSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newTraced(t, lrotel.TracingOptions{})
		enq := enqueueTraced(t, x, "job-1", leaserouter.WithMetadata(map[string]string{"tenant": "a"}))
		j, ok := x.r.Get("job-1")
		require.True(t, ok)
		require.Contains(t, j.Metadata, "traceparent")
		require.Equal(t, "a", j.Metadata["tenant"], "WithTraceContext merges with the caller's metadata")

		x.run(t, func(ctx context.Context, l *leaserouter.Lease[string]) error {
			_, child := x.tp.Tracer("app").Start(ctx, "send")
			child.End()
			return nil
		})

		spans := x.consumerSpans()
		require.Len(t, spans, 1)
		s := spans[0]
		require.Equal(t, "process default", s.Name())
		require.Equal(t, enq.TraceID(), s.SpanContext().TraceID(), "same trace as the enqueuing span")
		require.Equal(t, enq.SpanID(), s.Parent().SpanID(), "the enqueuing span is the parent")
		require.True(t, s.Parent().IsRemote(), "the parent came through the job's metadata")
		require.Len(t, s.Links(), 1)
		require.Equal(t, enq.SpanID(), s.Links()[0].SpanContext.SpanID(), "and a link to it")
		require.Equal(t, lrotel.ScopeName, s.InstrumentationScope().Name)
		require.Equal(t, codes.Unset, s.Status().Code)
		require.Equal(t, map[attribute.Key]attribute.Value{
			"messaging.system":           attribute.StringValue("leaserouter"),
			"messaging.operation.name":   attribute.StringValue("process"),
			"messaging.operation.type":   attribute.StringValue("process"),
			"messaging.destination.name": attribute.StringValue("default"),
			"messaging.message.id":       attribute.StringValue("job-1"),
			lrotel.AttemptKey:            attribute.IntValue(1),
			lrotel.KindKey:               attribute.StringValue("email"),
		}, attrs(s))

		var child sdktrace.ReadOnlySpan
		for _, e := range x.rec.Ended() {
			if e.Name() == "send" {
				child = e
			}
		}
		require.NotNil(t, child)
		require.Equal(t, s.SpanContext().SpanID(), child.Parent().SpanID(), "the handler's ctx carries the attempt's span")
	})
}

// TestNewTraceIsRootLinkedToEnqueuingSpan: with NewTrace the attempt's span
// starts a trace of its own, linked to the enqueuing span.
func TestNewTraceIsRootLinkedToEnqueuingSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newTraced(t, lrotel.TracingOptions{NewTrace: true})
		enq := enqueueTraced(t, x, "job-1")
		x.run(t, func(context.Context, *leaserouter.Lease[string]) error { return nil })

		spans := x.consumerSpans()
		require.Len(t, spans, 1)
		s := spans[0]
		require.False(t, s.Parent().IsValid(), "a root span")
		require.NotEqual(t, enq.TraceID(), s.SpanContext().TraceID())
		require.Len(t, s.Links(), 1)
		require.True(t, s.Links()[0].SpanContext.Equal(enq.WithRemote(true)), "linked to the enqueuing span")
	})
}

// TestNoTraceContextNoLink: a job enqueued without a span (or without
// WithTraceContext) carries no metadata, and its attempt's span has the
// handler ctx's span as parent (none here) and no link.
func TestNoTraceContextNoLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newTraced(t, lrotel.TracingOptions{})
		require.NoError(t, x.r.Enqueue("bare", "p", lrotel.WithTraceContext(context.Background())))
		j, _ := x.r.Get("bare")
		require.Nil(t, j.Metadata, "WithTraceContext with no span adds nothing")
		p := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		//lint:ignore SA1012 a nil ctx is what this checks
		require.NoError(t, x.r.Enqueue("nil-ctx", "p", lrotel.WithTraceContext(nil), lrotel.WithPropagatedContext(nil, p)))
		j, _ = x.r.Get("nil-ctx")
		require.Nil(t, j.Metadata, "nor with a nil ctx")
		require.NoError(t, x.r.Enqueue("other", "p", leaserouter.WithMetadata(map[string]string{"tenant": "a"})))
		x.run(t, func(context.Context, *leaserouter.Lease[string]) error { return nil })
		spans := x.consumerSpans()
		require.Len(t, spans, 3)
		for _, s := range spans {
			require.False(t, s.Parent().IsValid())
			require.Empty(t, s.Links())
		}
	})
}

// TestErrorSetsStatusError: a failed attempt's span has status Error, an
// exception event and error.type; the retry is a second span, attempt 2,
// in the same trace.
func TestErrorSetsStatusError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newTraced(t, lrotel.TracingOptions{})
		enq := enqueueTraced(t, x, "job-1")
		x.run(t, func(context.Context, *leaserouter.Lease[string]) error { return errors.New("smtp down") })

		spans := x.consumerSpans()
		require.Len(t, spans, 2, "two attempts (MaxAttempts 2)")
		for i, s := range spans {
			require.Equal(t, enq.TraceID(), s.SpanContext().TraceID())
			require.Equal(t, attribute.IntValue(i+1), attrs(s)[lrotel.AttemptKey])
			require.Equal(t, codes.Error, s.Status().Code)
			require.Equal(t, "smtp down", s.Status().Description)
			require.Equal(t, attribute.StringValue("errors.errorString"), attrs(s)["error.type"])
			require.Len(t, s.Events(), 1)
			require.Equal(t, "exception", s.Events()[0].Name)
		}
		j, _ := x.r.Get("job-1")
		require.Equal(t, leaserouter.StateDead, j.State, "the error is the attempt's outcome, unchanged")
	})
}

// TestPanicRecordedAndAttemptFails: a handler's panic goes through the
// middleware: its span records it with status Error and ends, and the
// router still fails the attempt with the panic, as a user sees it
// without tracing.
func TestPanicRecordedAndAttemptFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newTraced(t, lrotel.TracingOptions{})
		enqueueTraced(t, x, "job-1", leaserouter.WithMaxAttempts(1))
		x.run(t, func(context.Context, *leaserouter.Lease[string]) error { panic("boom") })

		spans := x.consumerSpans()
		require.Len(t, spans, 1, "the span ended")
		s := spans[0]
		require.Equal(t, codes.Error, s.Status().Code)
		require.Equal(t, "panic: boom", s.Status().Description)
		require.Equal(t, attribute.StringValue("panic"), attrs(s)["error.type"])
		require.Equal(t, "exception", s.Events()[0].Name)
		j, _ := x.r.Get("job-1")
		require.Equal(t, leaserouter.StateDead, j.State)
		require.Contains(t, j.LastError, "boom", "the router saw the panic")
		require.Contains(t, j.LastError, "panic")
	})
}

// TestSnoozeIsAnEventNotAnError: a Snooze leaves the status unset and
// adds a snoozed event with its delay.
func TestSnoozeIsAnEventNotAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := newTraced(t, lrotel.TracingOptions{})
		enqueueTraced(t, x, "job-1")
		x.run(t, func(context.Context, *leaserouter.Lease[string]) error { return leaserouter.Snooze(time.Minute) })

		spans := x.consumerSpans()
		require.Len(t, spans, 1)
		s := spans[0]
		require.Equal(t, codes.Unset, s.Status().Code)
		require.NotContains(t, attrs(s), attribute.Key("error.type"))
		require.Len(t, s.Events(), 1)
		require.Equal(t, lrotel.SnoozedEvent, s.Events()[0].Name)
		require.Equal(t, []attribute.KeyValue{lrotel.DelayKey.Float64(60)}, s.Events()[0].Attributes)
		j, _ := x.r.Get("job-1")
		require.Equal(t, leaserouter.StateScheduled, j.State)
	})
}

// panicky's Error panics, as a user's error type may.
type panicky struct{}

func (*panicky) Error() string { panic("Error() panicked") }

// TestErrorMethodPanicIsRecorded: an error whose Error method panics is
// recorded without the middleware panicking (the message says so).
func TestErrorMethodPanicIsRecorded(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mw := lrotel.NewTracingMiddleware(tp, lrotel.TracingOptions{})
	var nilErr *panicky
	err := mw(context.Background(), leaserouter.Attempt{Queue: "q", JobID: "j", Attempt: 1},
		func(context.Context) error { return nilErr })
	require.Same(t, nilErr, err)
	require.Len(t, rec.Ended(), 1)
	require.Equal(t, codes.Error, rec.Ended()[0].Status().Code)
	require.Contains(t, rec.Ended()[0].Status().Description, "panic")
}

// TestCustomPropagator: a propagator given to both sides (here a
// composite with baggage) carries the span context, and the baggage
// reaches the handler's ctx.
func TestCustomPropagator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		x := newTraced(t, lrotel.TracingOptions{Propagator: p})
		m, err := baggage.NewMember("tenant", "a")
		require.NoError(t, err)
		b, err := baggage.New(m)
		require.NoError(t, err)
		ctx, span := x.tp.Tracer("app").Start(baggage.ContextWithBaggage(context.Background(), b), "enqueue")
		require.NoError(t, x.r.Enqueue("job-1", "p", lrotel.WithPropagatedContext(ctx, p)))
		span.End()
		var got string
		x.run(t, func(ctx context.Context, _ *leaserouter.Lease[string]) error {
			got = baggage.FromContext(ctx).Member("tenant").Value()
			return nil
		})
		require.Equal(t, "a", got)
		spans := x.consumerSpans()
		require.Len(t, spans, 1)
		require.Equal(t, span.SpanContext().SpanID(), spans[0].Parent().SpanID())
	})
}

// TestNoopTracingBuildsNoAttributes: with a no-op provider (spans never
// recording) the middleware builds no attribute and allocates nothing per
// attempt beyond what the tracer's own Start does (the no-op tracer puts
// its span in a ctx: one allocation).
func TestNoopTracingBuildsNoAttributes(t *testing.T) {
	tp := noop.NewTracerProvider()
	mw := lrotel.NewTracingMiddleware(tp, lrotel.TracingOptions{})
	a := leaserouter.Attempt{Kind: "k", Queue: "q", JobID: "j", Attempt: 1}
	next := func(context.Context) error { return nil }
	ctx := context.Background()
	tracer := tp.Tracer("x")
	start := testing.AllocsPerRun(100, func() {
		_, s := tracer.Start(ctx, "process q")
		s.End()
	})
	require.Equal(t, start, testing.AllocsPerRun(100, func() { _ = mw(ctx, a, next) }))
}

// TestTraceContextParsedAsThePropagatorDoes: the middleware's own reading
// of traceparent and tracestate gives what propagation.TraceContext's
// Extract gives, valid or not.
func TestTraceContextParsedAsThePropagatorDoes(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, md := range []map[string]string{
		{"traceparent": "00-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-" + sid + "-00"},
		{"traceparent": "00-" + tid + "-" + sid + "-03"},
		{"traceparent": "00-" + tid + "-" + sid + "-04"}, // reserved flag in version 00
		{"traceparent": "00-" + tid + "-" + sid + "-01", "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
		{"traceparent": "00-" + tid + "-" + sid + "-01", "tracestate": "not a tracestate"},
		{"traceparent": "01-" + tid + "-" + sid + "-09-extra"}, // a later version may add fields
		{"traceparent": "01-" + tid + "-" + sid + "-09"},
		{"traceparent": "00-" + tid + "-" + sid + "-01-extra"},
		{"traceparent": "ff-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + "4BF92F3577B34DA6A3CE929D0E0E4736" + "-" + sid + "-01"},
		{"traceparent": "00-00000000000000000000000000000000-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-0000000000000000-01"},
		{"traceparent": "00-" + tid + "-" + sid},
		{"traceparent": "00_" + tid + "-" + sid + "-01"},
		{"traceparent": "0x-" + tid + "-" + sid + "-01"},
		{"traceparent": ""},
		{"tracestate": "a=b"},
		{},
	} {
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(md)))
		require.True(t, want.Equal(lrotel.ParseTraceContext(md)), "%v", md)
	}
}

// FuzzTraceContextParsedAsThePropagatorDoes: likewise for any traceparent
// and tracestate.
func FuzzTraceContextParsedAsThePropagatorDoes(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=00f067aa0ba902b7")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-x", "")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		md := map[string]string{"traceparent": tp, "tracestate": ts}
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(md)))
		require.True(t, want.Equal(lrotel.ParseTraceContext(md)), "%q %q", tp, ts)
	})
}
