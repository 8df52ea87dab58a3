package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter"
	lrprom "github.com/leaserouter/leaserouter/prometheus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ld = 10 * time.Second

// scenario runs a fixed workload in which every counter moves: a
// completion, a failure retried, a release, an expiry and its requeue, a
// duplicate, a cancel, heartbeats accepted and refused. In a bubble every
// duration is exact.
func scenario(t *testing.T, r *leaserouter.Router[string]) {
	t.Helper()
	for _, id := range []string{"a", "b", "c", "d"} {
		require.NoError(t, r.Enqueue(id, id))
	}
	require.ErrorIs(t, r.Enqueue("a", "again"), leaserouter.ErrDuplicate)
	time.Sleep(time.Second) // every job waits 1s for its first lease
	a, err := r.TryAcquire("w")
	require.NoError(t, err)
	b, err := r.TryAcquire("w")
	require.NoError(t, err)
	_, err = r.TryAcquire("w") // c: its holder crashes
	require.NoError(t, err)
	require.NoError(t, r.Cancel("d"))
	time.Sleep(2 * time.Second)
	require.NoError(t, a.Heartbeat(nil))
	require.NoError(t, a.Complete())               // ran 2s
	require.NoError(t, b.Fail(errors.New("boom"))) // ran 2s, retried at once (Backoff 0)
	require.ErrorIs(t, a.Heartbeat(nil), leaserouter.ErrLeaseLost)
	b, err = r.TryAcquire("w") // waited 0s
	require.NoError(t, err)
	require.NoError(t, b.Release()) // held 0s
	time.Sleep(ld)                  // c's lease expired at 11s
	time.Sleep(3 * time.Second)     // now 16s
	b, err = r.TryAcquire("w")      // b first: ready since its release at 3s, so it waited 13s
	require.NoError(t, err)
	require.Equal(t, "b", b.JobID)
	c, err := r.TryAcquire("w") // requeued after the expiry: waited 5s
	require.NoError(t, err)
	require.Equal(t, "c", c.JobID)
	require.Equal(t, 2, c.Attempt)
}

// TestCollectorMatchesStats checks the whole exposition of the scenario:
// gauges and counters equal to Stats, and the histograms' counts and
// exact sums.
func TestCollectorMatchesStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := lrprom.NewCollector(lrprom.Options{Buckets: []float64{1, 10}})
		var chained atomic.Int64
		r, err := leaserouter.New[string](leaserouter.Options{
			LeaseDuration: ld, Backoff: func(int) time.Duration { return 0 },
			OnEvent: c.Chain(func(leaserouter.Event) { chained.Add(1) }),
		})
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = r.Close(ctx) // revoke the two leases still held
		})
		c.Observe(r)
		reg := prom.NewPedanticRegistry()
		reg.MustRegister(c)

		scenario(t, r)
		synctest.Wait() // events delivered
		st := r.Stats()
		require.NotZero(t, chained.Load(), "the chained hook saw the events")
		want := fmt.Sprintf(`
# HELP leaserouter_jobs Jobs in each state now; finished ones count while retained.
# TYPE leaserouter_jobs gauge
leaserouter_jobs{queue="default",state="canceled"} 1
leaserouter_jobs{queue="default",state="dead"} 0
leaserouter_jobs{queue="default",state="leased"} 2
leaserouter_jobs{queue="default",state="pending"} 0
leaserouter_jobs{queue="default",state="scheduled"} 0
leaserouter_jobs{queue="default",state="succeeded"} 1
# HELP leaserouter_enqueued_total Jobs accepted by Enqueue.
# TYPE leaserouter_enqueued_total counter
leaserouter_enqueued_total{queue="default"} %d
# HELP leaserouter_duplicates_total Enqueue calls refused because the job ID was known.
# TYPE leaserouter_duplicates_total counter
leaserouter_duplicates_total{queue="default"} %d
# HELP leaserouter_leases_granted_total Leases granted (attempts started).
# TYPE leaserouter_leases_granted_total counter
leaserouter_leases_granted_total{queue="default"} %d
# HELP leaserouter_heartbeats_total Heartbeats accepted.
# TYPE leaserouter_heartbeats_total counter
leaserouter_heartbeats_total{queue="default"} %d
# HELP leaserouter_heartbeats_refused_total Heartbeats refused because the lease was lost.
# TYPE leaserouter_heartbeats_refused_total counter
leaserouter_heartbeats_refused_total{queue="default"} %d
# HELP leaserouter_lease_expirations_total Leases that expired (their holder stopped heartbeating).
# TYPE leaserouter_lease_expirations_total counter
leaserouter_lease_expirations_total{queue="default"} %d
# HELP leaserouter_retries_total Jobs scheduled again after a failed attempt.
# TYPE leaserouter_retries_total counter
leaserouter_retries_total{queue="default"} %d
# HELP leaserouter_stale_rejections_total Lease operations refused because the lease was lost (fencing at the router).
# TYPE leaserouter_stale_rejections_total counter
leaserouter_stale_rejections_total{queue="default"} %d
# HELP leaserouter_lease_wait_seconds Time a job was ready before it was leased: since its enqueue, run-at, release or the expiry of its previous lease.
# TYPE leaserouter_lease_wait_seconds histogram
leaserouter_lease_wait_seconds_bucket{queue="default",le="1"} 4
leaserouter_lease_wait_seconds_bucket{queue="default",le="10"} 5
leaserouter_lease_wait_seconds_bucket{queue="default",le="+Inf"} 6
leaserouter_lease_wait_seconds_sum{queue="default"} 21
leaserouter_lease_wait_seconds_count{queue="default"} 6
# HELP leaserouter_requeue_wait_seconds Time from a lease's expiry to its job being leased again.
# TYPE leaserouter_requeue_wait_seconds histogram
leaserouter_requeue_wait_seconds_bucket{queue="default",le="1"} 0
leaserouter_requeue_wait_seconds_bucket{queue="default",le="10"} 1
leaserouter_requeue_wait_seconds_bucket{queue="default",le="+Inf"} 1
leaserouter_requeue_wait_seconds_sum{queue="default"} 5
leaserouter_requeue_wait_seconds_count{queue="default"} 1
# HELP leaserouter_run_seconds Time from a lease's grant to its job's completion or failure, by outcome.
# TYPE leaserouter_run_seconds histogram
leaserouter_run_seconds_bucket{outcome="completed",queue="default",le="1"} 0
leaserouter_run_seconds_bucket{outcome="completed",queue="default",le="10"} 1
leaserouter_run_seconds_bucket{outcome="completed",queue="default",le="+Inf"} 1
leaserouter_run_seconds_sum{outcome="completed",queue="default"} 2
leaserouter_run_seconds_count{outcome="completed",queue="default"} 1
leaserouter_run_seconds_bucket{outcome="failed",queue="default",le="1"} 0
leaserouter_run_seconds_bucket{outcome="failed",queue="default",le="10"} 1
leaserouter_run_seconds_bucket{outcome="failed",queue="default",le="+Inf"} 1
leaserouter_run_seconds_sum{outcome="failed",queue="default"} 2
leaserouter_run_seconds_count{outcome="failed",queue="default"} 1
`, st.Enqueued, st.Duplicates, st.LeasesGranted, st.Heartbeats, st.HeartbeatsRefused,
			st.Expirations, st.Retries, st.StaleRejections)
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
			"leaserouter_jobs", "leaserouter_enqueued_total", "leaserouter_duplicates_total",
			"leaserouter_leases_granted_total", "leaserouter_heartbeats_total",
			"leaserouter_heartbeats_refused_total", "leaserouter_lease_expirations_total",
			"leaserouter_retries_total", "leaserouter_stale_rejections_total",
			"leaserouter_lease_wait_seconds", "leaserouter_requeue_wait_seconds", "leaserouter_run_seconds"))
		// The scenario moved every counter it names (but dead and purged).
		require.Equal(t, leaserouter.Stats{
			Leased: 2, Succeeded: 1, Canceled: 1, Enqueued: 4, Duplicates: 1, LeasesGranted: 6,
			Heartbeats: 1, HeartbeatsRefused: 1, Expirations: 1, Retries: 1, StaleRejections: 1,
		}, st)
		for name, want := range map[string]uint64{
			"leaserouter_leases_granted_total": st.LeasesGranted,
			"leaserouter_heartbeats_total":     st.Heartbeats,
			"leaserouter_dead_total":           st.Dead,
			"leaserouter_purged_total":         st.Purged,
		} {
			require.Equal(t, float64(want), testutil.ToFloat64(only{c, name}), name)
		}
		require.Equal(t, 6, testutil.CollectAndCount(c, "leaserouter_jobs"))
		problems, err := testutil.CollectAndLint(c)
		require.NoError(t, err)
		require.Empty(t, problems, "metric names and help follow the Prometheus conventions")
	})
}

// only is the one metric of c named name, for testutil.ToFloat64.
type only struct {
	c    prom.Collector
	name string
}

func (o only) Describe(ch chan<- *prom.Desc) { prom.DescribeByCollect(o, ch) }

func (o only) Collect(ch chan<- prom.Metric) {
	all := make(chan prom.Metric)
	go func() {
		o.c.Collect(all)
		close(all)
	}()
	for m := range all {
		if strings.Contains(m.Desc().String(), `fqName: "`+o.name+`"`) {
			ch <- m
		}
	}
}

// TestScrapeOverHTTP serves the Collector through promhttp and checks the
// exposition a scraper gets: every counter equals Stats at the scrape.
func TestScrapeOverHTTP(t *testing.T) {
	c := lrprom.NewCollector(lrprom.Options{ConstLabels: prom.Labels{"router": "test"}})
	r, err := leaserouter.New[string](leaserouter.Options{OnEvent: c.OnEvent})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	c.Observe(r)
	reg := prom.NewRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	for i := range 10 {
		require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
	}
	for range 7 {
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.NoError(t, l.Complete())
	}
	// Events reach the histograms from the Router's delivery goroutine:
	// Close delivers them all (Stats still answers after it).
	require.NoError(t, r.Close(context.Background()))
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	st := r.Stats()

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, "%s", body)
	value := func(name string) float64 {
		t.Helper()
		f := families[name]
		require.NotNil(t, f, "%s missing from:\n%s", name, body)
		require.Len(t, f.Metric, 1, name)
		m := f.Metric[0]
		require.Equal(t, "queue", m.Label[0].GetName())
		require.Equal(t, "default", m.Label[0].GetValue())
		require.Equal(t, "router", m.Label[1].GetName())
		require.Equal(t, "test", m.Label[1].GetValue())
		return m.GetCounter().GetValue()
	}
	require.EqualValues(t, st.Enqueued, value("leaserouter_enqueued_total"))
	require.EqualValues(t, 10, value("leaserouter_enqueued_total"))
	require.EqualValues(t, st.LeasesGranted, value("leaserouter_leases_granted_total"))
	require.EqualValues(t, 7, value("leaserouter_leases_granted_total"))
	require.EqualValues(t, st.Purged, value("leaserouter_purged_total"))
	require.EqualValues(t, 7, families["leaserouter_lease_wait_seconds"].Metric[0].GetHistogram().GetSampleCount())
	require.Contains(t, string(body), `leaserouter_jobs{queue="default",router="test",state="pending"} 3`)
	require.Contains(t, string(body), `leaserouter_jobs{queue="default",router="test",state="succeeded"} 7`)
}

// TestCollectorBeforeObserve: with no Router yet (or after Observe(nil)),
// a scrape has the histograms only (a series per queue, from the first
// event of that queue on), and nothing panics.
func TestCollectorBeforeObserve(t *testing.T) {
	c := lrprom.NewCollector(lrprom.Options{Namespace: "jobs"})
	require.Zero(t, testutil.CollectAndCount(c, "jobs_jobs"))
	require.Zero(t, testutil.CollectAndCount(c, "jobs_lease_wait_seconds"), "no event yet: no queue's series")
	c.OnEvent(leaserouter.Event{Kind: leaserouter.EventLeaseAcquired, Queue: "mail"})
	require.Equal(t, 1, testutil.CollectAndCount(c, "jobs_lease_wait_seconds"))
	r, err := leaserouter.New[int](leaserouter.Options{})
	require.NoError(t, err)
	defer r.Close(context.Background())
	c.Observe(r)
	require.Equal(t, 6, testutil.CollectAndCount(c, "jobs_jobs"))
	c.Observe(nil)
	require.Zero(t, testutil.CollectAndCount(c, "jobs_jobs"))
	require.NotNil(t, c.Chain(nil), "Chain(nil) is OnEvent alone")
}

// TestDeadJobsAreStateDead: the jobs with no attempts left are
// leaserouter_jobs{state="dead"}; no series says "failed".
func TestDeadJobsAreStateDead(t *testing.T) {
	c := lrprom.NewCollector(lrprom.Options{})
	r, err := leaserouter.New[int](leaserouter.Options{})
	require.NoError(t, err)
	defer r.Close(context.Background())
	require.NoError(t, r.Enqueue("a", 1))
	l, err := r.TryAcquire("w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(leaserouter.Permanent(errors.New("boom"))))
	c.Observe(r)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP leaserouter_jobs Jobs in each state now; finished ones count while retained.
# TYPE leaserouter_jobs gauge
leaserouter_jobs{queue="default",state="canceled"} 0
leaserouter_jobs{queue="default",state="dead"} 1
leaserouter_jobs{queue="default",state="leased"} 0
leaserouter_jobs{queue="default",state="pending"} 0
leaserouter_jobs{queue="default",state="scheduled"} 0
leaserouter_jobs{queue="default",state="succeeded"} 0
`), "leaserouter_jobs"))
}

// fixedStats is a (deprecated) StatsSource giving the same Stats at every
// scrape, observed through FromStats.
type fixedStats leaserouter.Stats

func (f fixedStats) Stats() leaserouter.Stats { return leaserouter.Stats(f) }

// TestEveryStatsTotalExported: each uint64 total of Stats is a counter,
// with its own value (a total added to Stats and not exported fails
// here).
func TestEveryStatsTotalExported(t *testing.T) {
	var st leaserouter.Stats
	v := reflect.ValueOf(&st).Elem()
	want := map[float64]string{}
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Uint64 {
			f.SetUint(uint64(1000 + i))
			want[float64(1000+i)] = v.Type().Field(i).Name
		}
	}
	c := lrprom.NewCollector(lrprom.Options{})
	c.Observe(lrprom.FromStats(fixedStats(st)))
	ch := make(chan prom.Metric, 64)
	c.Collect(ch)
	close(ch)
	for m := range ch {
		var pb dto.Metric
		require.NoError(t, m.Write(&pb))
		if pb.Counter != nil {
			delete(want, pb.Counter.GetValue())
		}
	}
	require.Empty(t, want, "Stats totals with no counter")
}

// queues is a StatsReader of several queues, as a Client of either
// backend is; err, when set, is what QueueStats returns instead, and
// deadline records the deadline of the ctx it was last given.
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

// TestCollectorReportsEveryQueue: a StatsReader's queues each get their
// own series, labeled with the queue's name.
func TestCollectorReportsEveryQueue(t *testing.T) {
	c := lrprom.NewCollector(lrprom.Options{})
	c.Observe(&queues{qs: []leaserouter.QueueStats{
		{Queue: "email", Stats: leaserouter.Stats{Pending: 3, Leased: 1, Enqueued: 10, Dead: 2}},
		{Queue: "reports", Stats: leaserouter.Stats{Scheduled: 5, Enqueued: 7}},
	}})
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(c)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP leaserouter_jobs Jobs in each state now; finished ones count while retained.
# TYPE leaserouter_jobs gauge
leaserouter_jobs{queue="email",state="canceled"} 0
leaserouter_jobs{queue="email",state="dead"} 0
leaserouter_jobs{queue="email",state="leased"} 1
leaserouter_jobs{queue="email",state="pending"} 3
leaserouter_jobs{queue="email",state="scheduled"} 0
leaserouter_jobs{queue="email",state="succeeded"} 0
leaserouter_jobs{queue="reports",state="canceled"} 0
leaserouter_jobs{queue="reports",state="dead"} 0
leaserouter_jobs{queue="reports",state="leased"} 0
leaserouter_jobs{queue="reports",state="pending"} 0
leaserouter_jobs{queue="reports",state="scheduled"} 5
leaserouter_jobs{queue="reports",state="succeeded"} 0
# HELP leaserouter_enqueued_total Jobs accepted by Enqueue.
# TYPE leaserouter_enqueued_total counter
leaserouter_enqueued_total{queue="email"} 10
leaserouter_enqueued_total{queue="reports"} 7
# HELP leaserouter_dead_total Jobs that reached the dead state (attempts exhausted or permanent failure).
# TYPE leaserouter_dead_total counter
leaserouter_dead_total{queue="email"} 2
leaserouter_dead_total{queue="reports"} 0
`), "leaserouter_jobs", "leaserouter_enqueued_total", "leaserouter_dead_total"))
}

// TestCollectorReadErrorIsInvalidMetric: a QueueStats that fails, panics,
// reports a queue twice or a name that is not UTF-8 makes the scrape an
// error naming the problem, never a panic; the histograms are still
// collected.
func TestCollectorReadErrorIsInvalidMetric(t *testing.T) {
	for name, tc := range map[string]struct {
		src  *queues
		want string
	}{
		"error":       {&queues{err: errors.New("connection refused")}, "QueueStats: connection refused"},
		"panic":       {&queues{panicV: "boom"}, "QueueStats panicked: boom"},
		"panic Error": {&queues{panicV: &panicky{}}, "QueueStats panicked: %!v(PANIC=Error method: Error() panicked)"},
		"twice": {&queues{qs: []leaserouter.QueueStats{{Queue: "a"}, {Queue: "a"}}},
			`reported queue "a" twice`},
		"not UTF-8": {&queues{qs: []leaserouter.QueueStats{{Queue: "\xff"}}}, "not valid UTF-8"},
	} {
		t.Run(name, func(t *testing.T) {
			c := lrprom.NewCollector(lrprom.Options{})
			c.Observe(tc.src)
			c.OnEvent(leaserouter.Event{Kind: leaserouter.EventLeaseAcquired, Queue: "a"})
			reg := prom.NewRegistry()
			reg.MustRegister(c)
			families, err := reg.Gather()
			require.ErrorContains(t, err, tc.want)
			var names []string
			for _, f := range families {
				names = append(names, f.GetName())
			}
			require.Contains(t, names, "leaserouter_lease_wait_seconds")
		})
	}
}

// panicky's Error panics, as a user's type may.
type panicky struct{}

func (*panicky) Error() string { panic("Error() panicked") }

// TestCollectorScrapeTimeout: QueueStats gets a ctx ending at the scrape
// timeout (DefaultScrapeTimeout when unset), and a StatsReader that waits
// for it makes the scrape an error, not a hang.
func TestCollectorScrapeTimeout(t *testing.T) {
	for _, tc := range []struct {
		opt, want time.Duration
	}{{0, lrprom.DefaultScrapeTimeout}, {-time.Second, lrprom.DefaultScrapeTimeout}, {time.Second, time.Second}} {
		synctest.Test(t, func(t *testing.T) {
			c := lrprom.NewCollector(lrprom.Options{ScrapeTimeout: tc.opt})
			src := &queues{block: true}
			c.Observe(src)
			reg := prom.NewRegistry()
			reg.MustRegister(c)
			start := time.Now()
			_, err := reg.Gather()
			require.ErrorContains(t, err, context.DeadlineExceeded.Error())
			require.Equal(t, start.Add(tc.want), src.deadline)
		})
	}
}

// TestConstLabelQueueRefusedAtRegister: "queue" is the Collector's own
// label, so a ConstLabel of that name makes Register fail (not a scrape,
// not a panic).
func TestConstLabelQueueRefusedAtRegister(t *testing.T) {
	c := lrprom.NewCollector(lrprom.Options{ConstLabels: prom.Labels{"queue": "mail"}})
	require.ErrorContains(t, prom.NewRegistry().Register(c), "queue")
}

// histogramCounts are the sample counts of the histogram family name, by
// the label values of its series (queue, then outcome where it has one).
func histogramCounts(t *testing.T, reg *prom.Registry, name string) map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var key []string
			for _, l := range m.GetLabel() {
				if l.GetName() == lrprom.QueueLabel {
					key = append([]string{l.GetValue()}, key...)
				} else {
					key = append(key, l.GetValue())
				}
			}
			out[strings.Join(key, "/")] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// TestHistogramsCarryTheEventsQueue: each histogram has a series per
// queue, from Event.Queue: a Client's queues by name, a Router's as
// "default"; a queue's series all appear at its first event; a queue
// name that is not UTF-8 is recorded with its bad bytes replaced, never a
// panic.
func TestHistogramsCarryTheEventsQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := lrprom.NewCollector(lrprom.Options{})
		reg := prom.NewPedanticRegistry()
		reg.MustRegister(c)
		cl, err := leaserouter.NewClient(leaserouter.ClientOptions{
			Options: leaserouter.Options{OnEvent: c.OnEvent, MaxAttempts: 1},
			Queues:  map[string]leaserouter.QueueConfig{"mail": {Workers: 1}, "reports": {Workers: 1}},
		})
		require.NoError(t, err)
		email, err := leaserouter.Register(cl, "email", func(context.Context, *leaserouter.Lease[string]) error { return nil },
			leaserouter.WithKindQueue("mail"))
		require.NoError(t, err)
		report, err := leaserouter.Register(cl, "report", func(context.Context, *leaserouter.Lease[int]) error {
			return errors.New("no data")
		}, leaserouter.WithKindQueue("reports"))
		require.NoError(t, err)
		ctx := context.Background()
		require.NoError(t, email.Enqueue(ctx, "a", "x"))
		require.NoError(t, email.Enqueue(ctx, "b", "x"))
		require.NoError(t, report.Enqueue(ctx, "weekly", 7))
		require.NoError(t, cl.Start(ctx))
		require.NoError(t, cl.Drained(ctx))
		require.NoError(t, cl.Stop(ctx))

		r, err := leaserouter.New[string](leaserouter.Options{OnEvent: c.OnEvent})
		require.NoError(t, err)
		require.NoError(t, r.Enqueue("c", "x"))
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.NoError(t, l.Complete())
		require.NoError(t, r.Close(ctx))

		c.OnEvent(leaserouter.Event{Kind: leaserouter.EventLeaseAcquired, Queue: "bad\xff"})

		require.Equal(t, map[string]uint64{"mail": 2, "reports": 1, "default": 1, "bad\uFFFD": 1},
			histogramCounts(t, reg, "leaserouter_lease_wait_seconds"))
		require.Equal(t, map[string]uint64{ // a queue's series all appear at its first event
			"mail/completed": 2, "mail/failed": 0, "reports/completed": 0, "reports/failed": 1,
			"default/completed": 1, "default/failed": 0, "bad\uFFFD/completed": 0, "bad\uFFFD/failed": 0},
			histogramCounts(t, reg, "leaserouter_run_seconds"))
	})
}

// TestOnEventWithConstLabelQueueDoesNotPanic: with a ConstLabel "queue"
// (which Register refuses), OnEvent still never panics.
func TestOnEventWithConstLabelQueueDoesNotPanic(t *testing.T) {
	c := lrprom.NewCollector(lrprom.Options{ConstLabels: prom.Labels{"queue": "mail"}})
	require.NotPanics(t, func() {
		c.OnEvent(leaserouter.Event{Kind: leaserouter.EventLeaseAcquired, Queue: "mail", Requeued: true})
		c.OnEvent(leaserouter.Event{Kind: leaserouter.EventCompleted, Queue: "mail"})
	})
}
