// Package otel brings leaserouter to OpenTelemetry: metrics, and tracing
// of each attempt. The package example wires the metrics to a Router;
// NewTracingMiddleware's example continues an enqueuing request's trace
// in an attempt's span.
//
// # Metrics
//
// Metrics records the same figures as the Prometheus adapter, as
// OpenTelemetry instruments, for any leaserouter.StatsReader (a core
// Router, a pgrouter Router, or a Client of either backend). Where the
// OpenTelemetry semantic conventions for messaging have an instrument, it
// is used: a job's run time is messaging.process.duration and a lease
// granted is a message consumed (messaging.client.consumed.messages),
// with messaging.system "leaserouter". The rest are named under
// "leaserouter.". It is a module of its own so that the leaserouter
// module depends on nothing but the standard library.
//
// Wire it like the Prometheus adapter: OnEvent (or Chain) into
// leaserouter.Options, then Observe the job set once it is made:
//
//	m, err := lrotel.New(otel.GetMeterProvider(), lrotel.Options{})
//	if err != nil { ... }
//	defer m.Close()
//	r, err := leaserouter.New[Payload](leaserouter.Options{OnEvent: m.OnEvent})
//	if err != nil { ... }
//	m.Observe(r)
//
// Every measurement read from Stats carries messaging.destination.name,
// the queue's name as the StatsReader reports it ("default" for a core
// Router). Earlier versions had no such attribute, so each of those
// instruments now has one series per queue where it had one: a query that
// matched the attribute set exactly needs the attribute added or
// aggregated away.
//
// The measurements OnEvent records (the lease-wait, requeue-wait and
// messaging.process.duration histograms, and the consumed-messages
// counter) carry messaging.destination.name too, the Event.Queue of the
// event (a Client's events name their queue, a core Router's "default",
// a pgrouter Router's its Options.Queue). Earlier versions had none
// there either: each of those instruments now has one series per queue
// where it had one, and a query that matched the attribute set exactly
// needs the attribute added or aggregated away.
//
// The jobs with no attempts left are leaserouter.jobs with
// leaserouter.job.state "dead" (leaserouter.StateDead). Earlier versions
// named that state "failed": that series is replaced by "dead", with the
// same value, and a query on "failed" needs "dead" instead.
//
// # Tracing
//
// NewTracingMiddleware runs each attempt of a Client inside a consumer
// span, a child of the span that enqueued the job, whose context
// WithTraceContext stores in the job's metadata (W3C traceparent), so a
// trace goes on across the queue and across processes:
//
//	tp := otel.GetTracerProvider()
//	c, err := leaserouter.NewClient(leaserouter.ClientOptions{
//		Middleware: []leaserouter.Middleware{lrotel.NewTracingMiddleware(tp, lrotel.TracingOptions{})},
//	})
//	...
//	err = emails.Enqueue(ctx, id, payload, lrotel.WithTraceContext(ctx))
package otel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/semconv/v1.40.0/messagingconv"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/statsread"
)

// ScopeName is the instrumentation scope (meter name) of every
// instrument.
const ScopeName = "github.com/leaserouter/leaserouter/otel"

// System is the messaging.system attribute on the semantic-convention
// instruments.
const System messagingconv.SystemAttr = "leaserouter"

// StatsSource is what Observe took before it took any
// leaserouter.StatsReader: something with the Stats of one queue.
//
// Deprecated: pass a leaserouter.StatsReader to Observe (every Router and
// Client of both backends is one); wrap a StatsSource of your own with
// FromStats.
type StatsSource interface {
	Stats() leaserouter.Stats
}

// FromStats makes a leaserouter.StatsReader of s: one queue, named
// leaserouter.DefaultQueue, whose Stats are s.Stats(); ctx is not passed
// to s. A nil s gives nil (Observe(nil) then stops reading).
func FromStats(s StatsSource) leaserouter.StatsReader {
	if s == nil {
		return nil
	}
	return statsSource{s}
}

type statsSource struct{ s StatsSource }

func (s statsSource) QueueStats(context.Context) ([]leaserouter.QueueStats, error) {
	return []leaserouter.QueueStats{{Queue: leaserouter.DefaultQueue, Stats: s.s.Stats()}}, nil
}

// DefaultCollectTimeout bounds the QueueStats call of a collection when
// Options.CollectTimeout is not set.
const DefaultCollectTimeout = 5 * time.Second

// Options configure Metrics. The zero value is valid.
type Options struct {
	// Attributes are added to every measurement, for example the name of
	// the service when a process has several job sets. Default none.
	Attributes []attribute.KeyValue
	// CollectTimeout bounds how long a collection waits for the observed
	// StatsReader's QueueStats (a pgrouter job set asks its database),
	// within the collection's own ctx. Zero or negative:
	// DefaultCollectTimeout.
	CollectTimeout time.Duration
}

// Metrics records one job set's metrics. Make it with New and stop its
// collection callback with Close. It is safe for concurrent use.
type Metrics struct {
	src     atomic.Pointer[leaserouter.StatsReader]
	base    []attribute.KeyValue
	timeout time.Duration
	reg     metric.Registration
	queues  sync.Map // queue name -> *queueOpts, made at its first collection

	consumed    messagingconv.ClientConsumedMessages
	process     messagingconv.ProcessDuration
	leaseWait   metric.Float64Histogram
	requeueWait metric.Float64Histogram

	// Each queue's record options for OnEvent, made at its first event:
	// a map replaced whole (under eventMu) when a queue is added, so that
	// OnEvent reads it with neither a lock nor an allocation.
	eventQueues atomic.Pointer[map[string]*eventOpts]
	eventMu     sync.Mutex
}

// eventOpts are one queue's record options for OnEvent.
type eventOpts struct {
	wait, consumed, processOK, processFailed metric.MeasurementOption
}

// gauge and counters read from Stats at every collection.
var statsCounters = []struct {
	name, unit, desc string
	value            func(*leaserouter.Stats) uint64
}{
	{"leaserouter.jobs.enqueued", "{job}", "Jobs accepted by Enqueue.", func(s *leaserouter.Stats) uint64 { return s.Enqueued }},
	{"leaserouter.jobs.duplicates", "{job}", "Enqueue calls refused because the job ID was known.", func(s *leaserouter.Stats) uint64 { return s.Duplicates }},
	{"leaserouter.leases.granted", "{lease}", "Leases granted (attempts started).", func(s *leaserouter.Stats) uint64 { return s.LeasesGranted }},
	{"leaserouter.heartbeats", "{heartbeat}", "Heartbeats accepted.", func(s *leaserouter.Stats) uint64 { return s.Heartbeats }},
	{"leaserouter.heartbeats.refused", "{heartbeat}", "Heartbeats refused because the lease was lost.", func(s *leaserouter.Stats) uint64 { return s.HeartbeatsRefused }},
	{"leaserouter.leases.expired", "{lease}", "Leases that expired (their holder stopped heartbeating).", func(s *leaserouter.Stats) uint64 { return s.Expirations }},
	{"leaserouter.jobs.retried", "{job}", "Jobs scheduled again after a failed attempt.", func(s *leaserouter.Stats) uint64 { return s.Retries }},
	{"leaserouter.jobs.dead", "{job}", "Jobs that reached the dead state (attempts exhausted or permanent failure).", func(s *leaserouter.Stats) uint64 { return s.Dead }},
	{"leaserouter.stale_rejections", "{operation}", "Lease operations refused because the lease was lost (fencing at the router).", func(s *leaserouter.Stats) uint64 { return s.StaleRejections }},
	{"leaserouter.jobs.purged", "{job}", "Finished jobs dropped, at once or after retention.", func(s *leaserouter.Stats) uint64 { return s.Purged }},
	{"leaserouter.jobs.manual_retries", "{job}", "Finished jobs made pending again by Router.Retry.", func(s *leaserouter.Stats) uint64 { return s.Retried }},
	{"leaserouter.leases.snoozed", "{lease}", "Leases ended by a snooze (the job ready again later, the attempt not counted).", func(s *leaserouter.Stats) uint64 { return s.Snoozed }},
	{"leaserouter.callback_panics", "{panic}", "Panics recovered from user callbacks (Backoff, OnEvent, the Logger, periodic jobs' Schedule and Payload).", func(s *leaserouter.Stats) uint64 { return s.CallbackPanics }},
}

// StateKey is the attribute of leaserouter.jobs giving the jobs' state,
// as leaserouter.State.String names it ("pending", ..., "dead",
// "canceled").
const StateKey = attribute.Key("leaserouter.job.state")

// queueOpts are one queue's measurement options: by state for
// leaserouter.jobs, and for the counters.
type queueOpts struct {
	byState  []metric.ObserveOption
	counters metric.ObserveOption
}

// New creates the instruments with mp's meter ScopeName and registers the
// callback that reads QueueStats at every collection. A nil mp is an
// error wrapping leaserouter.ErrInvalidOptions; an error from mp is
// returned as it is. Until Observe is called, collections have the
// histograms and the consumed-messages counter only.
func New(mp metric.MeterProvider, opts Options) (*Metrics, error) {
	if mp == nil {
		return nil, fmt.Errorf("%w: nil MeterProvider", leaserouter.ErrInvalidOptions)
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{
		base:    append([]attribute.KeyValue(nil), opts.Attributes...),
		timeout: opts.CollectTimeout,
	}
	if m.timeout <= 0 {
		m.timeout = DefaultCollectTimeout
	}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	m.consumed, err = messagingconv.NewClientConsumedMessages(meter)
	add(err)
	m.process, err = messagingconv.NewProcessDuration(meter)
	add(err)
	m.leaseWait, err = meter.Float64Histogram("leaserouter.lease.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a job was ready before it was leased: since its enqueue, run-at, release or the expiry of its previous lease."))
	add(err)
	m.requeueWait, err = meter.Float64Histogram("leaserouter.requeue.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a lease's expiry to its job being leased again."))
	add(err)
	jobs, err := meter.Int64ObservableGauge("leaserouter.jobs", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs in each state now; finished ones count while retained."))
	add(err)
	observables := []metric.Observable{jobs}
	counters := make([]metric.Int64ObservableCounter, len(statsCounters))
	for i, k := range statsCounters {
		counters[i], err = meter.Int64ObservableCounter(k.name, metric.WithUnit(k.unit), metric.WithDescription(k.desc))
		add(err)
		observables = append(observables, counters[i])
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m.eventQueues.Store(&map[string]*eventOpts{})

	m.reg, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		src := m.src.Load()
		if src == nil {
			return nil
		}
		qs, err := statsread.Read(ctx, "leaserouter/otel", *src, m.timeout)
		for _, q := range qs {
			qo := m.queueOpts(q.Queue)
			for st, n := range q.Stats.ByState() {
				o.ObserveInt64(jobs, int64(n), qo.byState[st])
			}
			for i, k := range statsCounters {
				o.ObserveInt64(counters[i], int64(k.value(&q.Stats)), qo.counters)
			}
		}
		return err
	}, observables...)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// queueOpts returns queue's measurement options, made at its first
// collection and kept (a StatsReader's queues are few and fixed).
func (m *Metrics) queueOpts(queue string) *queueOpts {
	if qo, ok := m.queues.Load(queue); ok {
		return qo.(*queueOpts)
	}
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		all := append(append([]attribute.KeyValue{}, m.base...), semconv.MessagingDestinationName(queue))
		return metric.WithAttributeSet(attribute.NewSet(append(all, kv...)...))
	}
	qo := &queueOpts{counters: with()}
	for st := range (leaserouter.Stats{}).ByState() {
		qo.byState = append(qo.byState, with(StateKey.String(st.String())))
	}
	got, _ := m.queues.LoadOrStore(queue, qo)
	return got.(*queueOpts)
}

// eventOpts returns queue's record options for OnEvent, made at its
// first event and kept.
func (m *Metrics) eventOpts(queue string) *eventOpts {
	if eo := (*m.eventQueues.Load())[queue]; eo != nil {
		return eo
	}
	m.eventMu.Lock()
	defer m.eventMu.Unlock()
	old := *m.eventQueues.Load()
	if eo := old[queue]; eo != nil {
		return eo // added meanwhile
	}
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		all := append(append([]attribute.KeyValue{}, m.base...), semconv.MessagingDestinationName(queue))
		return metric.WithAttributeSet(attribute.NewSet(append(all, kv...)...))
	}
	system := semconv.MessagingSystemKey.String(string(System))
	process := semconv.MessagingOperationNameKey.String("process")
	eo := &eventOpts{
		wait:      with(),
		consumed:  with(system, semconv.MessagingOperationNameKey.String("acquire")),
		processOK: with(system, process),
		// error.type: a handler error is not classified further here.
		processFailed: with(system, process, semconv.ErrorTypeKey.String(string(messagingconv.ErrorTypeOther))),
	}
	next := make(map[string]*eventOpts, len(old)+1)
	maps.Copy(next, old)
	next[queue] = eo
	m.eventQueues.Store(&next)
	return eo
}

// Observe makes the observable instruments read s's QueueStats at every
// collection, one series per queue; s is usually the Router or Client
// whose Options.OnEvent is m.OnEvent or m.Chain(...). Calling it again
// replaces s; nil stops reading. A collection whose QueueStats fails (an
// error, a panic, a queue reported twice, or CollectTimeout passed) has
// none of the instruments read from Stats, and the error is the
// callback's, which the SDK's reader returns from Collect and reports to
// the global error handler.
func (m *Metrics) Observe(s leaserouter.StatsReader) {
	if s == nil {
		m.src.Store(nil)
		return
	}
	m.src.Store(&s)
}

// OnEvent records the measurements e carries, with e.Queue as
// messaging.destination.name. Pass it as leaserouter.Options.OnEvent; it
// never blocks on the Router and records with context.Background (events
// carry no context).
func (m *Metrics) OnEvent(e leaserouter.Event) {
	ctx := context.Background()
	switch e.Kind {
	case leaserouter.EventLeaseAcquired:
		eo := m.eventOpts(e.Queue)
		m.consumed.Int64Counter.Add(ctx, 1, eo.consumed)
		m.leaseWait.Record(ctx, e.Wait.Seconds(), eo.wait)
		if e.Requeued {
			m.requeueWait.Record(ctx, e.Wait.Seconds(), eo.wait)
		}
	case leaserouter.EventCompleted:
		m.process.Float64Histogram.Record(ctx, e.Held.Seconds(), m.eventOpts(e.Queue).processOK)
	case leaserouter.EventFailed:
		m.process.Float64Histogram.Record(ctx, e.Held.Seconds(), m.eventOpts(e.Queue).processFailed)
	}
}

// Chain returns an OnEvent hook that records e, then calls next (if not
// nil).
func (m *Metrics) Chain(next func(leaserouter.Event)) func(leaserouter.Event) {
	if next == nil {
		return m.OnEvent
	}
	return func(e leaserouter.Event) {
		m.OnEvent(e)
		next(e)
	}
}

// Close unregisters the collection callback; the synchronous instruments
// keep what they recorded. It is safe to call more than once.
func (m *Metrics) Close() error {
	return m.reg.Unregister()
}
