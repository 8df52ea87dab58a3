package otel

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leaserouter/leaserouter"
)

// The attributes of an attempt's span that the messaging semantic
// conventions have no name for.
const (
	// AttemptKey is the attempt number (leaserouter.Attempt.Attempt: 1
	// for a job's first attempt).
	AttemptKey = attribute.Key("leaserouter.job.attempt")
	// KindKey is the job's kind (leaserouter.Attempt.Kind), set when the
	// kind is not "".
	KindKey = attribute.Key("leaserouter.job.kind")
)

// SnoozedEvent is the name of the span event an attempt's span gets when
// the attempt ends in a Snooze; its attribute DelayKey is the delay.
const SnoozedEvent = "snoozed"

// DelayKey is the delay of a snooze, in seconds, on the SnoozedEvent.
const DelayKey = attribute.Key("leaserouter.snooze.delay")

// TracingOptions configure NewTracingMiddleware. The zero value is valid:
// each attempt's span is a child of the span that enqueued the job, read
// from the W3C traceparent that WithTraceContext stored.
type TracingOptions struct {
	// NewTrace makes each attempt's span the root of a trace of its own,
	// linked to the enqueuing span instead of being its child: for jobs
	// whose enqueuing trace is long over when they run (periodic or
	// long-delayed jobs), so that one trace does not span days. Default
	// false.
	NewTrace bool
	// Propagator reads the enqueuing span's context from the job's
	// metadata. Default propagation.TraceContext{} (W3C traceparent and
	// tracestate), what WithTraceContext writes; with another one, write
	// the metadata with WithPropagatedContext and the same propagator.
	Propagator propagation.TextMapPropagator
}

// NewTracingMiddleware returns a leaserouter.Middleware that runs each
// attempt inside a span of kind Consumer, named "process <queue>", from
// tp's tracer ScopeName; a nil tp uses the global TracerProvider
// (otel.GetTracerProvider) at the time of the call.
//
// The span follows the OpenTelemetry messaging semantic conventions:
// messaging.system "leaserouter", messaging.operation.name and
// messaging.operation.type "process", messaging.destination.name the
// queue and messaging.message.id the job ID, and AttemptKey and KindKey.
// These are set only on a span that is recording, so a sampled-out or
// no-op span costs no attribute.
//
// Its parent is the span that enqueued the job, when the job's metadata
// holds its context (WithTraceContext), and the span also links to it;
// with TracingOptions.NewTrace the span is a new root, linked to that
// span. A job with no trace context in its metadata gets a span whose
// parent is the span in the handler's ctx, if any (a root with NewTrace),
// and no link. The handler's ctx
// carries the attempt's span, so the handler's own spans are its
// children.
//
// The attempt's outcome goes on the span: an error (including a
// Permanent one) is recorded as an exception event, with error.type and
// status Error; a Snooze is a SnoozedEvent and leaves the status unset;
// a panic in the handler or in a middleware inside this one is recorded
// as an error too, then goes on to the router, which fails the attempt
// with it as ever. The span ends when the attempt's chain returns. The
// middleware never calls a job's error's Error method unguarded: a panic
// there is recorded as the message. It is safe for concurrent use.
func NewTracingMiddleware(tp trace.TracerProvider, opts TracingOptions) leaserouter.Middleware {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := &tracing{
		tracer: tp.Tracer(ScopeName),
		prop:   opts.Propagator,
		start:  []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)},
	}
	if opts.NewTrace {
		t.start = append(t.start, trace.WithNewRoot())
	}
	if t.prop == nil {
		t.prop = propagation.TraceContext{}
	}
	_, t.traceContext = t.prop.(propagation.TraceContext)
	return t.middleware
}

// WithTraceContext returns a leaserouter.EnqueueOption that stores the
// context of the span in ctx with the job, as W3C traceparent and
// tracestate metadata (propagation.TraceContext), so that the job's
// attempts, traced by NewTracingMiddleware in this process or another
// one sharing the job set, continue the caller's trace. When ctx is nil
// or has no valid span context it adds nothing. It composes with
// WithMetadata (the options merge), and the two keys count against the
// metadata limits (a traceparent is 55 bytes).
func WithTraceContext(ctx context.Context) leaserouter.EnqueueOption {
	return WithPropagatedContext(ctx, propagation.TraceContext{})
}

// WithPropagatedContext is WithTraceContext with the propagator p, for a
// middleware whose TracingOptions.Propagator is p (a composite with
// baggage, or B3). What p writes is stored as metadata and must keep
// within its limits, or Enqueue returns an error wrapping
// leaserouter.ErrInvalidJob. A nil p is propagation.TraceContext{}; a nil
// ctx adds nothing.
func WithPropagatedContext(ctx context.Context, p propagation.TextMapPropagator) leaserouter.EnqueueOption {
	if ctx == nil {
		return leaserouter.WithMetadata(nil)
	}
	if p == nil {
		p = propagation.TraceContext{}
	}
	c := propagation.MapCarrier{}
	p.Inject(ctx, c)
	return leaserouter.WithMetadata(c) // copies c; an empty c adds nothing
}

// tracing is one middleware's settings.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	start  []trace.SpanStartOption // every span's: Consumer, and a new root with NewTrace
	// traceContext: prop is propagation.TraceContext, which reads nothing
	// but the span context.
	traceContext bool
	names        sync.Map                 // queue -> *spanName: one concatenation per queue, not per attempt
	last         atomic.Pointer[spanName] // the name last used
}

// metadataCarrier reads a job's metadata in place for a propagator
// (propagation.MapCarrier would do, but its Set writes, and the map is
// shared with the job's other readers).
type metadataCarrier map[string]string

func (c metadataCarrier) Get(key string) string { return c[key] }
func (c metadataCarrier) Set(string, string)    {} // read-only: Extract never sets
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

func (t *tracing) middleware(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) (err error) {
	var enq trace.SpanContext // the enqueuing span's, when the metadata has it
	if len(a.Metadata) > 0 {
		// Extracted onto an empty ctx first: what the metadata holds, and
		// only that. Asking the handler's ctx costs: a Run's is made only
		// when first asked, and a parent put on top of it is found first.
		c := metadataCarrier(a.Metadata)
		if t.traceContext {
			if enq = parseTraceContext(c); enq.IsValid() {
				ctx = trace.ContextWithRemoteSpanContext(ctx, enq)
			}
		} else if enq = trace.SpanContextFromContext(t.prop.Extract(context.Background(), c)); enq.IsValid() {
			ctx = t.prop.Extract(ctx, c) // again, for what else it reads, such as baggage
		}
	}
	ctx, span := t.tracer.Start(ctx, t.name(a.Queue), t.start...)
	defer func() {
		if p := recover(); p != nil {
			if span.IsRecording() {
				msg := "panic: " + safeText(func() string { return fmt.Sprint(p) })
				recordError(span, "panic", typeName(reflect.TypeOf(p)), msg)
			}
			span.End()
			panic(p) // the router recovers it and fails the attempt, as without this middleware
		}
		span.End()
	}()
	if span.IsRecording() {
		// Attributes and the link after Start, not as its options, so that
		// a span not recording costs neither (a sampler sees neither).
		attrs := [...]attribute.KeyValue{
			semconv.MessagingSystemKey.String(string(System)),
			semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(a.Queue),
			semconv.MessagingMessageID(a.JobID),
			AttemptKey.Int(a.Attempt),
			KindKey.String(a.Kind),
		}
		if a.Kind == "" {
			span.SetAttributes(attrs[:len(attrs)-1]...)
		} else {
			span.SetAttributes(attrs[:]...)
		}
		if enq.IsValid() {
			span.AddLink(trace.Link{SpanContext: enq})
		}
	}
	err = next(ctx)
	if err != nil && span.IsRecording() {
		if d, ok := leaserouter.SnoozeDelay(err); ok && d >= 0 {
			span.AddEvent(SnoozedEvent, trace.WithAttributes(DelayKey.Float64(d.Seconds())))
		} else {
			recordError(span, typeName(reflect.TypeOf(err)), typeName(reflect.TypeOf(err)), safeText(func() string { return err.Error() }))
		}
	}
	return err
}

// name is the span's name for queue, "process <queue>" as the messaging
// conventions name a consumer's span: made once per queue, and the last
// one kept at hand (most middlewares serve one queue at a time).
func (t *tracing) name(queue string) string {
	if n := t.last.Load(); n != nil && n.queue == queue {
		return n.name
	}
	var n *spanName
	if v, ok := t.names.Load(queue); ok {
		n = v.(*spanName)
	} else {
		v, _ := t.names.LoadOrStore(queue, &spanName{queue, "process " + queue})
		n = v.(*spanName)
	}
	t.last.Store(n)
	return n.name
}

// spanName is a queue's span name.
type spanName struct{ queue, name string }

// parseTraceContext is propagation.TraceContext's Extract without its
// allocations (a ctx made only to be read back): the span context of the
// W3C traceparent and tracestate in c, or an invalid one when c has no
// valid traceparent. Like Extract it accepts a later version's longer
// traceparent, refuses version ff, extra fields or reserved flags in
// version 00, and upper-case hex, and ignores a tracestate it cannot
// parse.
func parseTraceContext(c metadataCarrier) trace.SpanContext {
	h := c["traceparent"]
	// version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2
	if len(h) < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-' || (len(h) > 55 && h[55] != '-') {
		return trace.SpanContext{}
	}
	var ver, flags [1]byte
	var scc trace.SpanContextConfig
	if !unhex(ver[:], h[0:2]) || ver[0] == 0xff || !unhex(scc.TraceID[:], h[3:35]) ||
		!unhex(scc.SpanID[:], h[36:52]) || !unhex(flags[:], h[53:55]) ||
		(ver[0] == 0 && (len(h) != 55 || flags[0] > 3)) {
		return trace.SpanContext{}
	}
	scc.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	if ts := c["tracestate"]; ts != "" {
		scc.TraceState, _ = trace.ParseTraceState(ts) // a bad tracestate does not void the traceparent (W3C)
	}
	scc.Remote = true
	if sc := trace.NewSpanContext(scc); sc.IsValid() { // not an all-zero trace or span ID
		return sc
	}
	return trace.SpanContext{}
}

// unhex decodes the lower-case hex s into dst (len(s) == 2*len(dst)).
func unhex(dst []byte, s string) bool {
	for i := range dst {
		hi, lo := nibble(s[2*i]), nibble(s[2*i+1])
		if hi > 15 || lo > 15 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 0xff
}

// recordError puts an error on span as RecordError does (an exception
// event), with error.type, and sets the status to Error. It takes the
// message already made, so that no user code runs here.
func recordError(span trace.Span, errType, excType, msg string) {
	span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
		semconv.ExceptionType(excType), semconv.ExceptionMessage(msg)))
	span.SetAttributes(semconv.ErrorTypeKey.String(errType))
	span.SetStatus(codes.Error, msg)
}

// typeName is t's package-qualified name ("*errors.errorString" as
// "errors.errorString"), or "_OTHER" for a type with no name: what
// error.type asks for, read without calling the value's methods.
func typeName(t reflect.Type) string {
	if t == nil {
		return semconv.ErrorTypeOther.Value.AsString()
	}
	for t.Kind() == reflect.Pointer && t.Name() == "" {
		t = t.Elem()
	}
	if t.PkgPath() == "" || t.Name() == "" {
		if t.Name() != "" {
			return t.Name() // a predeclared type: a panic's string or int
		}
		return semconv.ErrorTypeOther.Value.AsString()
	}
	return t.PkgPath() + "." + t.Name()
}

// safeText returns f(), or a note if f panics (f is a user's Error or
// String method).
func safeText(f func() string) (s string) {
	defer func() {
		if p := recover(); p != nil {
			s = "(panic in its Error or String method)"
		}
	}()
	return f()
}
