package otel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestPgrouterAttemptSpansContinueTheEnqueuingTraceAcrossProcesses: two
// pgrouter Clients that share nothing but the database (each its own
// pool, tracer provider and span recorder, as two processes would) carry
// a trace across the queue. The one that enqueues, with Enqueue and with
// EnqueueTx inside a span each, stores the span's W3C traceparent with
// the job; the other runs the attempts through the tracing middleware,
// and each attempt's span has the enqueuing span as its (remote) parent
// and as a link, with the messaging attributes: queue, job ID, attempt,
// kind. A job retried (an error, then success) has two attempt spans,
// both children of the one enqueuing span.
func TestPgrouterAttemptSpansContinueTheEnqueuingTraceAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	dbEnq := pgtest.New(t)
	dbRun, err := pgxpool.NewWithConfig(ctx, dbEnq.Config().Copy()) // the same database, another pool
	require.NoError(t, err)
	t.Cleanup(dbRun.Close) // before pgtest drops the database

	// The enqueuing process: a Client never started, its own tracer.
	recEnq := tracetest.NewSpanRecorder()
	tpEnq := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recEnq), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	producer, err := pgrouter.NewClient(ctx, dbEnq, pgrouter.ClientOptions{Queues: map[string]pgrouter.QueueConfig{"mail": {}}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, producer.Stop(context.Background())) })
	send, err := pgrouter.Register(producer, "email", func(context.Context, *pgrouter.Lease[string]) error {
		return errors.New("the enqueuing process runs no job")
	}, leaserouter.WithKindQueue("mail"))
	require.NoError(t, err)

	enqueued := map[string]trace.SpanContext{} // job ID -> the span that enqueued it
	enqueueIn := func(id string, tx bool) {
		t.Helper()
		sctx, span := tpEnq.Tracer("app").Start(ctx, "POST /"+id, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if tx {
			pgtx, err := dbEnq.Begin(sctx)
			require.NoError(t, err)
			defer func() { _ = pgtx.Rollback(context.Background()) }() // after Commit: a no-op
			require.NoError(t, send.EnqueueTx(sctx, pgtx, id, id+"@example.com", lrotel.WithTraceContext(sctx)))
			require.NoError(t, pgtx.Commit(sctx))
		} else {
			require.NoError(t, send.Enqueue(sctx, id, id+"@example.com", lrotel.WithTraceContext(sctx)))
		}
		enqueued[id] = span.SpanContext()
	}
	enqueueIn("welcome", false)
	enqueueIn("receipt", true)
	enqueueIn("flaky", false)

	// The running process: another pool, tracer provider and recorder.
	recRun := tracetest.NewSpanRecorder()
	tpRun := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recRun), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	consumer, err := pgrouter.NewClient(ctx, dbRun, pgrouter.ClientOptions{
		Options:    pgrouter.Options{MaxAttempts: 3, Backoff: func(int) time.Duration { return 0 }},
		Queues:     map[string]pgrouter.QueueConfig{"mail": {Workers: 2}},
		Middleware: []leaserouter.Middleware{lrotel.NewTracingMiddleware(tpRun, lrotel.TracingOptions{})},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, consumer.Stop(context.Background())) })
	var mu sync.Mutex
	failed := map[string]bool{}
	_, err = pgrouter.Register(consumer, "email", func(ctx context.Context, l *pgrouter.Lease[string]) error {
		mu.Lock()
		defer mu.Unlock()
		if l.JobID == "flaky" && !failed[l.JobID] {
			failed[l.JobID] = true
			return errors.New("smtp: try again")
		}
		return nil
	}, leaserouter.WithKindQueue("mail"))
	require.NoError(t, err)
	require.NoError(t, consumer.Start(ctx))
	// Real time: the two Clients meet through a real server. Generous.
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, consumer.Drained(dctx))
	require.NoError(t, consumer.Stop(dctx))
	require.Len(t, recEnq.Ended(), 3, "the enqueuing spans, in the enqueuing process")

	byJob := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range recRun.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer {
			id := attrs(s)[semconv.MessagingMessageIDKey].AsString()
			byJob[id] = append(byJob[id], s)
		}
	}
	require.Len(t, byJob, 3)
	require.Len(t, byJob["welcome"], 1)
	require.Len(t, byJob["receipt"], 1)
	require.Len(t, byJob["flaky"], 2, "a retried job: a span per attempt")

	for id, spans := range byJob {
		enq := enqueued[id]
		for i, s := range spans {
			require.Equal(t, "process mail", s.Name(), id)
			require.True(t, s.Parent().IsRemote(), "%s: the parent is another process's span", id)
			require.Equal(t, enq.SpanID(), s.Parent().SpanID(), "%s attempt %d: the enqueuing span is the parent", id, i+1)
			require.Equal(t, enq.TraceID(), s.SpanContext().TraceID(), id)
			require.Len(t, s.Links(), 1, id)
			require.Equal(t, enq.TraceID(), s.Links()[0].SpanContext.TraceID(), id)
			require.Equal(t, enq.SpanID(), s.Links()[0].SpanContext.SpanID(), "%s: linked to the enqueuing span", id)
			a := attrs(s)
			require.Equal(t, "leaserouter", a[semconv.MessagingSystemKey].AsString())
			require.Equal(t, "process", a[semconv.MessagingOperationNameKey].AsString())
			require.Equal(t, "mail", a[semconv.MessagingDestinationNameKey].AsString())
			require.Equal(t, "email", a[lrotel.KindKey].AsString())
		}
	}
	flaky := byJob["flaky"]
	attempts := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range flaky {
		attempts[attrs(s)[lrotel.AttemptKey].AsInt64()] = s
	}
	require.Len(t, attempts, 2)
	require.Equal(t, codes.Error, attempts[1].Status().Code)
	require.Equal(t, "smtp: try again", attempts[1].Status().Description)
	require.Equal(t, codes.Unset, attempts[2].Status().Code)
	require.EqualValues(t, 1, attrs(byJob["welcome"][0])[lrotel.AttemptKey].AsInt64())
	require.EqualValues(t, 1, attrs(byJob["receipt"][0])[lrotel.AttemptKey].AsInt64())
}
