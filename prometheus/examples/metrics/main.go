// Command metrics runs a faulty workload on a leaserouter Router for a few
// seconds with the Prometheus adapter served over HTTP, then prints the
// scrape's leaserouter_ lines and checks every counter against Stats.
//
//	go run ./examples/metrics                  # in prometheus/: 3s on a free port
//	go run ./examples/metrics -port 9100 -duration 1m
//
// While it runs, `curl <the printed URL>` shows the metrics moving. The
// workload: a producer enqueues up to -rate jobs a second; Run's 4 workers
// fail 10% of jobs (retried after a backoff), panic on 2%, and run 2% for
// 80ms, kept alive by heartbeats; two flaky workers beside them crash on a
// quarter of their jobs (drop the lease, which expires) and stall past the
// lease on another quarter before trying to complete (refused: a stale
// rejection).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leaserouter/leaserouter"
	lrprom "github.com/leaserouter/leaserouter/prometheus"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	port := fs.Int("port", 0, "port to serve /metrics on, on 127.0.0.1 (0: any free port)")
	duration := fs.Duration("duration", 3*time.Second, "how long the workload runs")
	rate := fs.Int("rate", 5000, "jobs enqueued per second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *duration <= 0 || *rate <= 0 || *port < 0 || *port > 65535 {
		return fmt.Errorf("need -duration > 0, -rate > 0 and -port in [0, 65535]")
	}

	c := lrprom.NewCollector(lrprom.Options{})
	r, err := leaserouter.New[int](leaserouter.Options{
		LeaseDuration: 100 * time.Millisecond,
		MaxAttempts:   4,
		Backoff:       func(int) time.Duration { return 20 * time.Millisecond },
		OnEvent:       c.OnEvent,
	})
	if err != nil {
		return err
	}
	c.Observe(r)
	reg := prom.NewRegistry()
	reg.MustRegister(c)

	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		_ = r.Close(ctx)
		return err
	}
	url := "http://" + ln.Addr().String() + "/metrics"
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Close()
		<-served
	}()
	fmt.Fprintf(out, "serving %s for %v\n", url, *duration)

	work(ctx, r, *duration, *rate)
	// Close waits for every event to be delivered, so the histograms are
	// final and Stats does not move any more.
	if err := r.Close(ctx); err != nil {
		return err
	}
	scrape, err := get(url)
	if err != nil {
		return err
	}
	for line := range strings.Lines(scrape) {
		if strings.HasPrefix(line, "leaserouter_") {
			fmt.Fprint(out, line)
		}
	}
	if err := consistent(scrape, r.Stats()); err != nil {
		return err
	}
	fmt.Fprintln(out, "every counter in the scrape equals Stats()")
	return nil
}

// work runs the faulty workload for d, enqueuing rate jobs a second.
func work(ctx context.Context, r *leaserouter.Router[int], d time.Duration, rate int) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-tick.C:
				_ = r.Enqueue(fmt.Sprint("job-", i), i)
			case <-ctx.Done():
				return
			}
		}
	})
	wg.Go(func() {
		_ = r.Run(ctx, leaserouter.WorkerOptions{Workers: 4, WorkerID: "worker", HeartbeatInterval: 30 * time.Millisecond},
			func(ctx context.Context, l *leaserouter.Lease[int]) error {
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond) // the work
				switch n := rand.IntN(100); {
				case n < 10:
					return errors.New("transient failure")
				case n < 12:
					panic("handler bug")
				case n < 14: // a long job: Run's heartbeats keep its lease
					time.Sleep(80 * time.Millisecond)
				}
				return nil
			})
	})
	for range 2 {
		wg.Go(func() { flaky(ctx, r) })
	}
	wg.Wait()
}

// flaky is a worker that crashes (abandons its lease) or stalls past it,
// one job in two, and behaves otherwise.
func flaky(ctx context.Context, r *leaserouter.Router[int]) {
	for {
		l, err := r.Acquire(ctx, "flaky")
		if err != nil {
			return
		}
		switch rand.IntN(4) {
		case 0: // crash: never heartbeat, never complete
		case 1: // stall past the lease, then act as if nothing happened
			select {
			case <-time.After(150 * time.Millisecond):
			case <-ctx.Done():
			}
			_ = l.Complete() // refused: the lease expired
		default:
			_ = l.Complete()
		}
	}
}

func get(url string) (string, error) {
	res, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return string(body), nil
}

// consistent checks every counter and gauge of the scrape against s.
func consistent(scrape string, s leaserouter.Stats) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(scrape))
	if err != nil {
		return err
	}
	want := map[string]uint64{
		"leaserouter_enqueued_total":           s.Enqueued,
		"leaserouter_duplicates_total":         s.Duplicates,
		"leaserouter_leases_granted_total":     s.LeasesGranted,
		"leaserouter_heartbeats_total":         s.Heartbeats,
		"leaserouter_heartbeats_refused_total": s.HeartbeatsRefused,
		"leaserouter_lease_expirations_total":  s.Expirations,
		"leaserouter_retries_total":            s.Retries,
		"leaserouter_dead_total":               s.Dead,
		"leaserouter_stale_rejections_total":   s.StaleRejections,
		"leaserouter_purged_total":             s.Purged,
	}
	var errs []error
	for name, v := range want {
		f := families[name]
		if f == nil || len(f.Metric) != 1 {
			errs = append(errs, fmt.Errorf("%s: missing from the scrape", name))
			continue
		}
		if got := f.Metric[0].GetCounter().GetValue(); got != float64(v) {
			errs = append(errs, fmt.Errorf("%s is %v in the scrape, %d in Stats", name, got, v))
		}
	}
	byState := map[string]int{
		"pending": s.Pending, "scheduled": s.Scheduled, "leased": s.Leased,
		"succeeded": s.Succeeded, "dead": s.DeadJobs, "canceled": s.Canceled,
	}
	if f := families["leaserouter_jobs"]; f == nil || len(f.Metric) != len(byState) {
		errs = append(errs, errors.New("leaserouter_jobs: missing or incomplete"))
	} else {
		for _, m := range f.Metric {
			var state string
			for _, l := range m.GetLabel() { // queue="default", state=...
				if l.GetName() == "state" {
					state = l.GetValue()
				}
			}
			if got := m.GetGauge().GetValue(); got != float64(byState[state]) {
				errs = append(errs, fmt.Errorf("leaserouter_jobs{state=%q} is %v in the scrape, %d in Stats", state, got, byState[state]))
			}
		}
	}
	if f := families["leaserouter_lease_wait_seconds"]; f == nil || f.Metric[0].GetHistogram().GetSampleCount() != s.LeasesGranted {
		errs = append(errs, errors.New("leaserouter_lease_wait_seconds: count differs from leases granted"))
	}
	return errors.Join(errs...)
}
