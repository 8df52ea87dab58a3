package otel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter"
	lrotel "github.com/leaserouter/leaserouter/otel"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m) // stops the cluster BenchmarkTracingPG starts, before the leak check
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const ld = 10 * time.Second

// collected is one collection, by instrument name.
type collected map[string]metricdata.Metrics

func collect(t *testing.T, reader *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, lrotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sum returns the value of a counter's one data point.
func (c collected) sum(t *testing.T, name string) int64 {
	t.Helper()
	m, ok := c[name]
	require.True(t, ok, "%s not collected", name)
	s, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is %T", name, m.Data)
	require.True(t, s.IsMonotonic, name)
	require.Len(t, s.DataPoints, 1, name)
	return s.DataPoints[0].Value
}

// hist returns a histogram's data point with the given attribute values.
func (c collected) hist(t *testing.T, name string, kv ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	m, ok := c[name]
	require.True(t, ok, "%s not collected", name)
	require.Equal(t, "s", m.Unit, name)
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is %T", name, m.Data)
	for _, dp := range h.DataPoints {
		match := true
		for _, a := range kv {
			v, ok := dp.Attributes.Value(a.Key)
			match = match && ok && v == a.Value
		}
		if match {
			return dp
		}
	}
	t.Fatalf("%s has no data point with %v", name, kv)
	return metricdata.HistogramDataPoint[float64]{}
}

// TestMetricsMatchStats runs a workload in which every figure moves, with
// exact durations in a bubble, and checks each instrument against Stats
// and the known durations.
func TestMetricsMatchStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		m, err := lrotel.New(mp, lrotel.Options{Attributes: []attribute.KeyValue{attribute.String("router", "test")}})
		require.NoError(t, err)
		defer func() { require.NoError(t, m.Close()) }()
		r, err := leaserouter.New[string](leaserouter.Options{
			LeaseDuration: ld, Backoff: func(int) time.Duration { return 0 }, OnEvent: m.OnEvent,
		})
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = r.Close(ctx)
		})
		m.Observe(r)

		for _, id := range []string{"a", "b", "c"} {
			require.NoError(t, r.Enqueue(id, id))
		}
		require.ErrorIs(t, r.Enqueue("a", ""), leaserouter.ErrDuplicate)
		time.Sleep(time.Second)
		a, err := r.TryAcquire("w") // waited 1s
		require.NoError(t, err)
		b, err := r.TryAcquire("w") // waited 1s
		require.NoError(t, err)
		_, err = r.TryAcquire("w") // c, waited 1s: its holder crashes
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		require.NoError(t, a.Heartbeat(nil))
		require.NoError(t, a.Complete())               // ran 2s
		require.NoError(t, b.Fail(errors.New("boom"))) // ran 2s, pending again at once
		require.ErrorIs(t, a.Heartbeat(nil), leaserouter.ErrLeaseLost)
		time.Sleep(ld)             // c expired at 11s; now 13s
		_, err = r.TryAcquire("w") // b, waited 10s
		require.NoError(t, err)
		_, err = r.TryAcquire("w") // c, requeued: waited 2s
		require.NoError(t, err)
		synctest.Wait()

		got := collect(t, reader)
		st := r.Stats()
		require.Equal(t, leaserouter.Stats{
			Leased: 2, Succeeded: 1, Enqueued: 3, Duplicates: 1, LeasesGranted: 5, Heartbeats: 1,
			HeartbeatsRefused: 1, Expirations: 1, Retries: 1, StaleRejections: 1,
		}, st)
		for name, want := range map[string]uint64{
			"leaserouter.jobs.enqueued": st.Enqueued, "leaserouter.jobs.duplicates": st.Duplicates,
			"leaserouter.leases.granted": st.LeasesGranted, "leaserouter.heartbeats": st.Heartbeats,
			"leaserouter.heartbeats.refused": st.HeartbeatsRefused, "leaserouter.leases.expired": st.Expirations,
			"leaserouter.jobs.retried": st.Retries, "leaserouter.jobs.dead": st.Dead,
			"leaserouter.stale_rejections": st.StaleRejections, "leaserouter.jobs.purged": st.Purged,
		} {
			require.EqualValues(t, want, got.sum(t, name), name)
		}
		require.EqualValues(t, st.LeasesGranted, got.sum(t, "messaging.client.consumed.messages"))

		jobs := got["leaserouter.jobs"].Data.(metricdata.Gauge[int64])
		byState := map[string]int64{}
		for _, dp := range jobs.DataPoints {
			v, ok := dp.Attributes.Value(lrotel.StateKey)
			require.True(t, ok)
			router, _ := dp.Attributes.Value("router")
			require.Equal(t, "test", router.AsString(), "Options.Attributes on every measurement")
			queue, _ := dp.Attributes.Value("messaging.destination.name")
			require.Equal(t, "default", queue.AsString(), "a core Router's queue")
			byState[v.AsString()] = dp.Value
		}
		require.Equal(t, map[string]int64{
			"pending": 0, "scheduled": 0, "leased": 2, "succeeded": 1, "dead": 0, "canceled": 0,
		}, byState)

		wait := got.hist(t, "leaserouter.lease.wait.duration")
		require.EqualValues(t, 5, wait.Count)
		require.Equal(t, 1.0+1+1+10+2, wait.Sum)
		requeue := got.hist(t, "leaserouter.requeue.wait.duration")
		require.EqualValues(t, 1, requeue.Count)
		require.Equal(t, 2.0, requeue.Sum)
		system := attribute.String("messaging.system", "leaserouter")
		process := attribute.String("messaging.operation.name", "process")
		failed := got.hist(t, "messaging.process.duration", system, process, attribute.String("error.type", "_OTHER"))
		require.EqualValues(t, 1, failed.Count)
		require.Equal(t, 2.0, failed.Sum)
		var runs uint64
		for _, dp := range got["messaging.process.duration"].Data.(metricdata.Histogram[float64]).DataPoints {
			require.True(t, dp.Attributes.HasValue("messaging.system") && dp.Attributes.HasValue("messaging.operation.name"))
			runs += dp.Count
		}
		require.EqualValues(t, 2, runs, "a completion and a failure")
	})
}

func TestNewAndObserveEdges(t *testing.T) {
	_, err := lrotel.New(nil, lrotel.Options{})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)

	reader := sdkmetric.NewManualReader()
	m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), lrotel.Options{})
	require.NoError(t, err)
	_, ok := collect(t, reader)["leaserouter.jobs.enqueued"]
	require.False(t, ok, "nothing read from Stats before Observe")
	r, err := leaserouter.New[int](leaserouter.Options{OnEvent: m.Chain(nil)})
	require.NoError(t, err)
	defer r.Close(context.Background())
	m.Observe(r)
	require.NoError(t, r.Enqueue("x", 1))
	require.EqualValues(t, 1, collect(t, reader).sum(t, "leaserouter.jobs.enqueued"))
	m.Observe(nil)
	_, ok = collect(t, reader)["leaserouter.jobs.enqueued"]
	require.False(t, ok, "nothing read after Observe(nil)")
	var chained int
	hook := m.Chain(func(leaserouter.Event) { chained++ })
	hook(leaserouter.Event{Kind: leaserouter.EventLeaseAcquired})
	require.Equal(t, 1, chained)
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "Close twice")
}

// fixedStats is a (deprecated) StatsSource giving the same Stats at every
// collection, observed through FromStats.
type fixedStats leaserouter.Stats

func (f fixedStats) Stats() leaserouter.Stats { return leaserouter.Stats(f) }

// TestEveryStatsTotalExported: each uint64 total of Stats is an
// observable counter, with its own value (a total added to Stats and not
// exported fails here).
func TestEveryStatsTotalExported(t *testing.T) {
	var st leaserouter.Stats
	v := reflect.ValueOf(&st).Elem()
	want := map[int64]string{}
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Uint64 {
			f.SetUint(uint64(1000 + i))
			want[int64(1000+i)] = v.Type().Field(i).Name
		}
	}
	reader := sdkmetric.NewManualReader()
	m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), lrotel.Options{})
	require.NoError(t, err)
	defer m.Close()
	m.Observe(lrotel.FromStats(fixedStats(st)))
	for _, got := range collect(t, reader) {
		if s, ok := got.Data.(metricdata.Sum[int64]); ok && s.IsMonotonic && len(s.DataPoints) == 1 {
			delete(want, s.DataPoints[0].Value)
		}
	}
	require.Empty(t, want, "Stats totals with no counter")
}

// queues is a StatsReader of several queues, as a Client of either
// backend is; err, when set, is what QueueStats returns instead.
type queues struct {
	qs       []leaserouter.QueueStats
	err      error
	panicV   any
	block    bool // wait for ctx to end, as a database that does not answer
	deadline time.Time
}

func (q *queues) QueueStats(ctx context.Context) ([]leaserouter.QueueStats, error) {
	q.deadline, _ = ctx.Deadline()
	if q.panicV != nil {
		panic(q.panicV)
	}
	if q.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return q.qs, q.err
}

// byQueue is the value of each of metric name's data points by queue
// (and state, for leaserouter.jobs).
func (c collected) byQueue(t *testing.T, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	var dps []metricdata.DataPoint[int64]
	switch d := c[name].Data.(type) {
	case metricdata.Sum[int64]:
		dps = d.DataPoints
	case metricdata.Gauge[int64]:
		dps = d.DataPoints
	default:
		t.Fatalf("%s is %T", name, d)
	}
	for _, dp := range dps {
		q, ok := dp.Attributes.Value("messaging.destination.name")
		require.True(t, ok, name)
		key := q.AsString()
		if st, ok := dp.Attributes.Value(lrotel.StateKey); ok {
			key += "/" + st.AsString()
		}
		out[key] = dp.Value
	}
	return out
}

// TestMetricsReportEveryQueue: a StatsReader's queues each get their own
// series, with messaging.destination.name the queue's name.
func TestMetricsReportEveryQueue(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), lrotel.Options{})
	require.NoError(t, err)
	defer m.Close()
	m.Observe(&queues{qs: []leaserouter.QueueStats{
		{Queue: "email", Stats: leaserouter.Stats{Pending: 3, Enqueued: 10, Dead: 2}},
		{Queue: "reports", Stats: leaserouter.Stats{Scheduled: 5, Enqueued: 7}},
	}})
	got := collect(t, reader)
	require.Equal(t, map[string]int64{"email": 10, "reports": 7}, got.byQueue(t, "leaserouter.jobs.enqueued"))
	require.Equal(t, map[string]int64{"email": 2, "reports": 0}, got.byQueue(t, "leaserouter.jobs.dead"))
	jobs := got.byQueue(t, "leaserouter.jobs")
	require.Len(t, jobs, 12, "6 states of 2 queues")
	require.EqualValues(t, 3, jobs["email/pending"])
	require.EqualValues(t, 5, jobs["reports/scheduled"])
	require.EqualValues(t, 0, jobs["reports/pending"])
}

// TestMetricsReadErrorIsReported: a QueueStats that fails, panics or
// reports a queue twice makes the collection return an error naming the
// problem, never a panic, and no measurement read from Stats; the rest of
// the collection goes on.
func TestMetricsReadErrorIsReported(t *testing.T) {
	for name, tc := range map[string]struct {
		src  *queues
		want string
	}{
		"error": {&queues{err: errors.New("connection refused")}, "QueueStats: connection refused"},
		"panic": {&queues{panicV: "boom"}, "QueueStats panicked: boom"},
		"twice": {&queues{qs: []leaserouter.QueueStats{{Queue: "a"}, {Queue: "a"}}}, `reported queue "a" twice`},
	} {
		t.Run(name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), lrotel.Options{})
			require.NoError(t, err)
			defer m.Close()
			m.Observe(tc.src)
			m.OnEvent(leaserouter.Event{Kind: leaserouter.EventLeaseAcquired})
			var rm metricdata.ResourceMetrics
			require.ErrorContains(t, reader.Collect(context.Background(), &rm), tc.want)
			names := map[string]bool{}
			for _, sm := range rm.ScopeMetrics {
				for _, x := range sm.Metrics {
					names[x.Name] = true
				}
			}
			require.True(t, names["messaging.client.consumed.messages"], "the synchronous instruments are collected")
			require.False(t, names["leaserouter.jobs.enqueued"], "nothing read from a failed QueueStats")
		})
	}
}

// TestMetricsCollectTimeout: QueueStats gets a ctx ending at the collect
// timeout (DefaultCollectTimeout when unset), and a StatsReader that waits
// for it makes the collection an error, not a hang.
func TestMetricsCollectTimeout(t *testing.T) {
	for _, tc := range []struct {
		opt, want time.Duration
	}{{0, lrotel.DefaultCollectTimeout}, {-time.Second, lrotel.DefaultCollectTimeout}, {time.Second, time.Second}} {
		synctest.Test(t, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), lrotel.Options{CollectTimeout: tc.opt})
			require.NoError(t, err)
			defer m.Close()
			src := &queues{block: true}
			m.Observe(src)
			start := time.Now()
			var rm metricdata.ResourceMetrics
			require.ErrorIs(t, reader.Collect(context.Background(), &rm), context.DeadlineExceeded)
			require.Equal(t, start.Add(tc.want), src.deadline)
		})
	}
}

// histCounts are the sample counts of histogram name's data points by
// queue (messaging.destination.name), with "/"+error.type where set.
func (c collected) histCounts(t *testing.T, name string) map[string]uint64 {
	t.Helper()
	h, ok := c[name].Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is %T", name, c[name].Data)
	out := map[string]uint64{}
	for _, dp := range h.DataPoints {
		q, ok := dp.Attributes.Value(semconv.MessagingDestinationNameKey)
		require.True(t, ok, "%s has no queue", name)
		v, ok := dp.Attributes.Value("service")
		require.True(t, ok && v.AsString() == "shop", "%s keeps Options.Attributes", name)
		key := q.AsString()
		if e, ok := dp.Attributes.Value(semconv.ErrorTypeKey); ok {
			key += "/" + e.AsString()
		}
		out[key] = dp.Count
	}
	return out
}

// TestEventMeasurementsCarryTheEventsQueue: what OnEvent records (lease
// and requeue wait, run time, leases consumed) has a series per queue,
// from Event.Queue: a Client's queues by name, a Router's as "default".
func TestEventMeasurementsCarryTheEventsQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		m, err := lrotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
			lrotel.Options{Attributes: []attribute.KeyValue{attribute.String("service", "shop")}})
		require.NoError(t, err)
		defer m.Close()
		c, err := leaserouter.NewClient(leaserouter.ClientOptions{
			Options: leaserouter.Options{OnEvent: m.OnEvent, MaxAttempts: 1},
			Queues:  map[string]leaserouter.QueueConfig{"mail": {Workers: 1}, "reports": {Workers: 1}},
		})
		require.NoError(t, err)
		email, err := leaserouter.Register(c, "email", func(context.Context, *leaserouter.Lease[string]) error { return nil },
			leaserouter.WithKindQueue("mail"))
		require.NoError(t, err)
		report, err := leaserouter.Register(c, "report", func(context.Context, *leaserouter.Lease[int]) error {
			return errors.New("no data")
		}, leaserouter.WithKindQueue("reports"))
		require.NoError(t, err)
		ctx := context.Background()
		require.NoError(t, email.Enqueue(ctx, "a", "x"))
		require.NoError(t, email.Enqueue(ctx, "b", "x"))
		require.NoError(t, report.Enqueue(ctx, "weekly", 7))
		require.NoError(t, c.Start(ctx))
		require.NoError(t, c.Drained(ctx))
		require.NoError(t, c.Stop(ctx))

		r, err := leaserouter.New[string](leaserouter.Options{OnEvent: m.OnEvent})
		require.NoError(t, err)
		require.NoError(t, r.Enqueue("c", "x"))
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.NoError(t, l.Complete())
		require.NoError(t, r.Close(ctx))
		m.OnEvent(leaserouter.Event{Kind: leaserouter.EventLeaseAcquired, Queue: "mail", Requeued: true, Wait: time.Second})

		got := collect(t, reader)
		require.Equal(t, map[string]uint64{"mail": 3, "reports": 1, "default": 1}, got.histCounts(t, "leaserouter.lease.wait.duration"))
		require.Equal(t, map[string]uint64{"mail": 1}, got.histCounts(t, "leaserouter.requeue.wait.duration"))
		require.Equal(t, map[string]uint64{"mail": 2, "reports/_OTHER": 1, "default": 1}, got.histCounts(t, "messaging.process.duration"))
		require.Equal(t, map[string]int64{"mail": 3, "reports": 1, "default": 1}, got.byQueue(t, "messaging.client.consumed.messages"))
	})
}
