// Package otel records a leaserouter Router's metrics with OpenTelemetry:
// the same figures as the Prometheus adapter, as OpenTelemetry
// instruments. Where the OpenTelemetry semantic conventions for messaging
// have an instrument, it is used: a job's run time is
// messaging.process.duration and a lease granted is a message consumed
// (messaging.client.consumed.messages), with messaging.system
// "leaserouter". The rest are named under "leaserouter.". It is a module
// of its own so that the leaserouter module depends on nothing but the
// standard library.
//
// Wire it like the Prometheus adapter: OnEvent (or Chain) into
// leaserouter.Options, then Observe the Router once New returns it:
//
//	m, err := lrotel.New(otel.GetMeterProvider(), lrotel.Options{})
//	if err != nil { ... }
//	defer m.Close()
//	r, err := leaserouter.New[Payload](leaserouter.Options{OnEvent: m.OnEvent})
//	if err != nil { ... }
//	m.Observe(r)
package otel

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/semconv/v1.40.0/messagingconv"

	"github.com/leaserouter/leaserouter"
)

// ScopeName is the instrumentation scope (meter name) of every
// instrument.
const ScopeName = "github.com/leaserouter/leaserouter/otel"

// System is the messaging.system attribute on the semantic-convention
// instruments.
const System messagingconv.SystemAttr = "leaserouter"

// StatsSource is what the observable instruments read at collection: a
// *leaserouter.Router of any payload type.
type StatsSource interface {
	Stats() leaserouter.Stats
}

// Options configure Metrics. The zero value is valid.
type Options struct {
	// Attributes are added to every measurement, for example the name of
	// the Router when a process has several. Default none.
	Attributes []attribute.KeyValue
}

// Metrics records one Router's metrics. Make it with New and stop its
// collection callback with Close. It is safe for concurrent use.
type Metrics struct {
	src   atomic.Pointer[StatsSource]
	attrs attribute.Set
	reg   metric.Registration

	consumed    messagingconv.ClientConsumedMessages
	process     messagingconv.ProcessDuration
	leaseWait   metric.Float64Histogram
	requeueWait metric.Float64Histogram

	// Precomputed record options, so that OnEvent allocates nothing.
	withAttrs, consumedAttrs, processOK, processFailed metric.MeasurementOption
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

// StateKey is the attribute of leaserouter.jobs giving the jobs' state.
const StateKey = attribute.Key("leaserouter.job.state")

// New creates the instruments with mp's meter ScopeName and registers the
// callback that reads Stats at every collection. A nil mp is an error
// wrapping leaserouter.ErrInvalidOptions; an error from mp is returned as
// it is. Until Observe is called, collections have the histograms and the
// consumed-messages counter only.
func New(mp metric.MeterProvider, opts Options) (*Metrics, error) {
	if mp == nil {
		return nil, fmt.Errorf("%w: nil MeterProvider", leaserouter.ErrInvalidOptions)
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{attrs: attribute.NewSet(opts.Attributes...)}
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

	base := opts.Attributes
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue{}, base...), kv...)...))
	}
	m.withAttrs = metric.WithAttributeSet(m.attrs)
	system := semconv.MessagingSystemKey.String(string(System))
	m.consumedAttrs = with(system, semconv.MessagingOperationNameKey.String("acquire"))
	process := semconv.MessagingOperationNameKey.String("process")
	m.processOK = with(system, process)
	// error.type: a handler error is not classified further here.
	m.processFailed = with(system, process, semconv.ErrorTypeKey.String(string(messagingconv.ErrorTypeOther)))
	var stateOpts []metric.ObserveOption // by State
	for st := range (leaserouter.Stats{}).ByState() {
		stateOpts = append(stateOpts, with(StateKey.String(st.String())))
	}

	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		src := m.src.Load()
		if src == nil {
			return nil
		}
		s := (*src).Stats()
		for st, n := range s.ByState() {
			o.ObserveInt64(jobs, int64(n), stateOpts[st])
		}
		for i, k := range statsCounters {
			o.ObserveInt64(counters[i], int64(k.value(&s)), m.withAttrs)
		}
		return nil
	}, observables...)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Observe makes the observable instruments read s's Stats at every
// collection; s is usually the *leaserouter.Router whose Options.OnEvent
// is m.OnEvent or m.Chain(...). Calling it again replaces s; nil stops
// reading.
func (m *Metrics) Observe(s StatsSource) {
	if s == nil {
		m.src.Store(nil)
		return
	}
	m.src.Store(&s)
}

// OnEvent records the measurements e carries. Pass it as
// leaserouter.Options.OnEvent; it never blocks on the Router and records
// with context.Background (events carry no context).
func (m *Metrics) OnEvent(e leaserouter.Event) {
	ctx := context.Background()
	switch e.Kind {
	case leaserouter.EventLeaseAcquired:
		m.consumed.Int64Counter.Add(ctx, 1, m.consumedAttrs)
		m.leaseWait.Record(ctx, e.Wait.Seconds(), m.withAttrs)
		if e.Requeued {
			m.requeueWait.Record(ctx, e.Wait.Seconds(), m.withAttrs)
		}
	case leaserouter.EventCompleted:
		m.process.Float64Histogram.Record(ctx, e.Held.Seconds(), m.processOK)
	case leaserouter.EventFailed:
		m.process.Float64Histogram.Record(ctx, e.Held.Seconds(), m.processFailed)
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
