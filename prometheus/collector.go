// Package prometheus exposes leaserouter job sets to Prometheus: gauges
// of jobs by state and counters of every total in Stats, per queue, read
// at scrape time from any leaserouter.StatsReader (a core Router, a
// pgrouter Router, or a Client of either backend, one series per queue),
// and histograms of the durations the Router's events carry (lease wait,
// requeue wait after an expiry, run time). It is a module of its own so
// that the leaserouter module depends on nothing but the standard library.
// The package example wires a Collector to a Router and reads what it
// exports.
//
// Wire it in three steps: the Collector's OnEvent goes into
// leaserouter.Options (alone, or chained with your own hook), Observe
// names the job set once it is made, and the Collector is registered like
// any other:
//
//	c := lrprom.NewCollector(lrprom.Options{})
//	r, err := leaserouter.New[Payload](leaserouter.Options{OnEvent: c.Chain(myHook)})
//	if err != nil { ... }
//	c.Observe(r)
//	prometheus.MustRegister(c)
//
// Metric names follow the Prometheus conventions (base units, _total for
// counters, _seconds for durations) under the namespace "leaserouter".
//
// # Series
//
// Every gauge and counter read from Stats carries a "queue" label, the
// queue's name as the StatsReader reports it ("default" for a core
// Router, Options.Queue for a pgrouter Router). Earlier versions had no
// such label, so their series (leaserouter_jobs{state="pending"}) are
// replaced by new ones (leaserouter_jobs{queue="default",state="pending"}):
// a query or alert that matches on the full label set, or a recording
// rule that aggregates without "by", needs the label added or summed
// away. ConstLabels may no longer name "queue" (registering the Collector
// then fails).
//
// The histograms carry the "queue" label too, the Event.Queue of the
// events they record (a Client's events name their queue, a core
// Router's DefaultQueue, a pgrouter Router's its Options.Queue). Earlier
// versions had none, so each histogram's series are replaced as the
// counters' were (leaserouter_run_seconds_bucket{outcome="completed",le="1"}
// becomes leaserouter_run_seconds_bucket{outcome="completed",queue="default",le="1"}),
// and a queue's histogram series appear at its first event, all of them
// (each outcome of run_seconds too, at zero until it records).
//
// The jobs with no attempts left are leaserouter_jobs{state="dead"}
// (leaserouter.StateDead). Earlier versions named that state "failed":
// their leaserouter_jobs{state="failed"} series is replaced by
// state="dead", with the same value, and a query or alert on
// state="failed" needs state="dead" instead. "failed" stays only where it
// means one failed attempt: leaserouter_run_seconds{outcome="failed"}.
package prometheus

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/statsread"
)

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
// to s. A nil s gives nil (Observe(nil) then stops exporting Stats).
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

// DefaultScrapeTimeout bounds the QueueStats call of a scrape when
// Options.ScrapeTimeout is not set.
const DefaultScrapeTimeout = 5 * time.Second

// QueueLabel is the label naming the queue on every metric: those read
// from Stats, and the histograms (from Event.Queue).
const QueueLabel = "queue"

// Options configure a Collector. The zero value is valid.
type Options struct {
	// Namespace prefixes every metric name. Default "leaserouter".
	Namespace string
	// ConstLabels are added to every metric, for example the name of the
	// Router when a process has several. Default none.
	ConstLabels prom.Labels
	// Buckets are the upper bounds, in seconds, of every histogram.
	// Default DefaultBuckets.
	Buckets []float64
	// ScrapeTimeout bounds how long a scrape waits for the observed
	// StatsReader's QueueStats (a pgrouter job set asks its database).
	// Zero or negative: DefaultScrapeTimeout.
	ScrapeTimeout time.Duration
}

// DefaultBuckets span 10µs to about 42s, a factor of 4 apart: an in-process
// lease wait is microseconds when workers are idle and seconds when they
// are not; run times span the same range.
var DefaultBuckets = prom.ExponentialBuckets(10e-6, 4, 12)

// Collector is a prometheus.Collector over one job set. Make one with
// NewCollector; it is safe for concurrent use (OnEvent from the Router's
// event delivery, Collect from scrapes, Observe from anywhere).
type Collector struct {
	src     atomic.Pointer[leaserouter.StatsReader]
	timeout time.Duration

	jobs     *prom.Desc
	counters []counter

	leaseWait   *prom.HistogramVec // by queue
	requeueWait *prom.HistogramVec // by queue
	run         *prom.HistogramVec // by queue and outcome

	// Each queue's histograms, found at its first event: a map replaced
	// whole (under histMu) when a queue is added, so that OnEvent reads it
	// with neither a lock nor an allocation.
	hists  atomic.Pointer[map[string]*queueHists]
	histMu sync.Mutex
}

// queueHists are one queue's histograms; nil where the client library
// refused the series (a ConstLabel "queue": Register refuses the
// Collector anyway).
type queueHists struct {
	leaseWait, requeueWait, completed, failed prom.Observer
}

// counter is one Stats total exported as a Prometheus counter.
type counter struct {
	desc  *prom.Desc
	value func(*leaserouter.Stats) uint64
}

// NewCollector returns a Collector with no job set yet: until Observe is
// called, a scrape has only the histograms.
func NewCollector(opts Options) *Collector {
	ns := opts.Namespace
	if ns == "" {
		ns = "leaserouter"
	}
	buckets := opts.Buckets
	if buckets == nil {
		buckets = DefaultBuckets
	}
	c := &Collector{
		timeout: opts.ScrapeTimeout,
		jobs: prom.NewDesc(prom.BuildFQName(ns, "", "jobs"),
			"Jobs in each state now; finished ones count while retained.", []string{QueueLabel, "state"}, opts.ConstLabels),
	}
	if c.timeout <= 0 {
		c.timeout = DefaultScrapeTimeout
	}
	for _, k := range []struct {
		name, help string
		value      func(*leaserouter.Stats) uint64
	}{
		{"enqueued_total", "Jobs accepted by Enqueue.", func(s *leaserouter.Stats) uint64 { return s.Enqueued }},
		{"duplicates_total", "Enqueue calls refused because the job ID was known.", func(s *leaserouter.Stats) uint64 { return s.Duplicates }},
		{"leases_granted_total", "Leases granted (attempts started).", func(s *leaserouter.Stats) uint64 { return s.LeasesGranted }},
		{"heartbeats_total", "Heartbeats accepted.", func(s *leaserouter.Stats) uint64 { return s.Heartbeats }},
		{"heartbeats_refused_total", "Heartbeats refused because the lease was lost.", func(s *leaserouter.Stats) uint64 { return s.HeartbeatsRefused }},
		{"lease_expirations_total", "Leases that expired (their holder stopped heartbeating).", func(s *leaserouter.Stats) uint64 { return s.Expirations }},
		{"retries_total", "Jobs scheduled again after a failed attempt.", func(s *leaserouter.Stats) uint64 { return s.Retries }},
		{"dead_total", "Jobs that reached the dead state (attempts exhausted or permanent failure).", func(s *leaserouter.Stats) uint64 { return s.Dead }},
		{"stale_rejections_total", "Lease operations refused because the lease was lost (fencing at the router).", func(s *leaserouter.Stats) uint64 { return s.StaleRejections }},
		{"purged_total", "Finished jobs dropped, at once or after retention.", func(s *leaserouter.Stats) uint64 { return s.Purged }},
		{"manual_retries_total", "Finished jobs made pending again by Router.Retry.", func(s *leaserouter.Stats) uint64 { return s.Retried }},
		{"snoozed_total", "Leases ended by a snooze (the job ready again later, the attempt not counted).", func(s *leaserouter.Stats) uint64 { return s.Snoozed }},
		{"callback_panics_total", "Panics recovered from user callbacks (Backoff, OnEvent, the Logger, periodic jobs' Schedule and Payload).", func(s *leaserouter.Stats) uint64 { return s.CallbackPanics }},
	} {
		c.counters = append(c.counters, counter{
			desc:  prom.NewDesc(prom.BuildFQName(ns, "", k.name), k.help, []string{QueueLabel}, opts.ConstLabels),
			value: k.value,
		})
	}
	c.leaseWait = prom.NewHistogramVec(prom.HistogramOpts{
		Namespace: ns, Name: "lease_wait_seconds", ConstLabels: opts.ConstLabels, Buckets: buckets,
		Help: "Time a job was ready before it was leased: since its enqueue, run-at, release or the expiry of its previous lease.",
	}, []string{QueueLabel})
	c.requeueWait = prom.NewHistogramVec(prom.HistogramOpts{
		Namespace: ns, Name: "requeue_wait_seconds", ConstLabels: opts.ConstLabels, Buckets: buckets,
		Help: "Time from a lease's expiry to its job being leased again.",
	}, []string{QueueLabel})
	c.run = prom.NewHistogramVec(prom.HistogramOpts{
		Namespace: ns, Name: "run_seconds", ConstLabels: opts.ConstLabels, Buckets: buckets,
		Help: "Time from a lease's grant to its job's completion or failure, by outcome.",
	}, []string{QueueLabel, "outcome"})
	c.hists.Store(&map[string]*queueHists{})
	return c
}

// Observe makes the Collector export s's Stats at every scrape, one
// series per queue that s.QueueStats reports; s is usually the Router or
// Client whose Options.OnEvent is c.OnEvent or c.Chain(...). Calling it
// again replaces s; nil stops exporting Stats. A Collector observes one
// StatsReader: for several job sets, use a Collector each with distinct
// ConstLabels, or a Client, which reports all its queues.
func (c *Collector) Observe(s leaserouter.StatsReader) {
	if s == nil {
		c.src.Store(nil)
		return
	}
	c.src.Store(&s)
}

// OnEvent records the durations e carries in the histograms, labelled
// with e.Queue (a Queue that is not valid UTF-8 has its bad bytes
// replaced by U+FFFD). Pass it as leaserouter.Options.OnEvent; it never
// blocks, never panics and never calls back into the Router.
func (c *Collector) OnEvent(e leaserouter.Event) {
	switch e.Kind {
	case leaserouter.EventLeaseAcquired:
		h := c.queueHists(e.Queue)
		observe(h.leaseWait, e.Wait)
		if e.Requeued {
			observe(h.requeueWait, e.Wait)
		}
	case leaserouter.EventCompleted:
		observe(c.queueHists(e.Queue).completed, e.Held)
	case leaserouter.EventFailed:
		observe(c.queueHists(e.Queue).failed, e.Held)
	}
}

// queueHists returns queue's histograms, found at its first event and
// kept.
func (c *Collector) queueHists(queue string) *queueHists {
	if h := (*c.hists.Load())[queue]; h != nil {
		return h
	}
	c.histMu.Lock()
	defer c.histMu.Unlock()
	old := *c.hists.Load()
	if h := old[queue]; h != nil {
		return h // added meanwhile
	}
	// The client library panics on a label value that is not valid UTF-8
	// (WithLabelValues) or refuses it (GetMetricWithLabelValues): such a
	// queue is recorded with its bad bytes replaced.
	label := strings.ToValidUTF8(queue, "\uFFFD")
	get := func(h *prom.HistogramVec, lvs ...string) prom.Observer {
		o, err := h.GetMetricWithLabelValues(lvs...)
		if err != nil {
			return nil
		}
		return o
	}
	h := &queueHists{
		leaseWait:   get(c.leaseWait, label),
		requeueWait: get(c.requeueWait, label),
		completed:   get(c.run, label, "completed"),
		failed:      get(c.run, label, "failed"),
	}
	next := make(map[string]*queueHists, len(old)+1)
	maps.Copy(next, old)
	next[queue] = h
	c.hists.Store(&next)
	return h
}

// observe records d in o, unless o is nil.
func observe(o prom.Observer, d time.Duration) {
	if o != nil {
		o.Observe(d.Seconds())
	}
}

// Chain returns an OnEvent hook that records e, then calls next (if not
// nil), so the Collector can share Options.OnEvent with a hook of your
// own.
func (c *Collector) Chain(next func(leaserouter.Event)) func(leaserouter.Event) {
	if next == nil {
		return c.OnEvent
	}
	return func(e leaserouter.Event) {
		c.OnEvent(e)
		next(e)
	}
}

// Describe sends every metric's description (prometheus.Collector).
func (c *Collector) Describe(ch chan<- *prom.Desc) {
	ch <- c.jobs
	for _, k := range c.counters {
		ch <- k.desc
	}
	c.leaseWait.Describe(ch)
	c.requeueWait.Describe(ch)
	c.run.Describe(ch)
}

// Collect sends the current metrics (prometheus.Collector). The gauges and
// counters come from one QueueStats call, bounded by
// Options.ScrapeTimeout, so they are consistent with each other and with
// the StatsReader at that instant. When that call fails (or panics, or
// reports a queue twice), the scrape gets an invalid metric carrying the
// error, which a registry's Gather returns as an error, and no gauge or
// counter; the histograms are sent all the same. It blocks for at most
// the timeout, plus whatever a StatsReader that ignores its ctx takes.
func (c *Collector) Collect(ch chan<- prom.Metric) {
	if src := c.src.Load(); src != nil {
		qs, err := statsread.Read(context.Background(), "leaserouter/prometheus", *src, c.timeout)
		if err != nil {
			ch <- prom.NewInvalidMetric(c.jobs, err)
		}
		for _, q := range qs {
			for st, n := range q.Stats.ByState() {
				ch <- constMetric(c.jobs, prom.GaugeValue, float64(n), q.Queue, st.String())
			}
			for _, k := range c.counters {
				ch <- constMetric(k.desc, prom.CounterValue, float64(k.value(&q.Stats)), q.Queue)
			}
		}
	}
	c.leaseWait.Collect(ch)
	c.requeueWait.Collect(ch)
	c.run.Collect(ch)
}

// constMetric is prom.MustNewConstMetric, or an invalid metric where that
// would panic (a queue name that is not valid UTF-8).
func constMetric(desc *prom.Desc, t prom.ValueType, v float64, labels ...string) prom.Metric {
	m, err := prom.NewConstMetric(desc, t, v, labels...)
	if err != nil {
		return prom.NewInvalidMetric(desc, err)
	}
	return m
}
