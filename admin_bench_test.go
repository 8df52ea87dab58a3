package leaserouter

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkList: a page of 100 of List on a Router holding 1,000,000 jobs
// (env-free: always 1M), 990,000 succeeded and 10,000 dead spread among
// them, for the console's jobs and dead pages: the first page and a page
// from the middle (by its cursor), unfiltered, of the dead, and by an ID
// prefix matching one job in a thousand. Reports ms per page, p50 and
// p99. Target: <= 100 ms.
//
//	go test -run '^$' -bench BenchmarkList -benchtime 200x .
func BenchmarkList(b *testing.B) {
	const n = 1_000_000
	r := benchRouter(b, Options{Retention: time.Hour, MaxAttempts: 1})
	for i := 0; i < n; i += 1000 {
		specs := make([]JobSpec[int], 1000)
		for k := range specs {
			specs[k] = JobSpec[int]{ID: fmt.Sprintf("job-%07d", i+k)}
		}
		if _, err := r.EnqueueMany(specs); err != nil {
			b.Fatal(err)
		}
		ls, err := r.TryAcquireMany("w", 1000)
		if err != nil {
			b.Fatal(err)
		}
		for k, l := range ls {
			if k%100 == 0 {
				err = l.Fail(Permanent(fmt.Errorf("boom")))
			} else {
				err = l.Complete()
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	dead := []State{StateDead}
	// The cursor of the page that ends in the middle, found by paging.
	p := ListParams{Limit: MaxListLimit}
	for range n / 2 / MaxListLimit {
		page, err := r.List(p)
		if err != nil {
			b.Fatal(err)
		}
		p.Cursor = page.NextCursor
	}
	middle := p.Cursor
	for _, c := range []struct {
		name string
		p    ListParams
	}{
		{"first", ListParams{}},
		{"middle", ListParams{Cursor: middle}},
		{"dead", ListParams{States: dead}},
		{"prefix", ListParams{IDPrefix: "job-05000"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				page, err := r.List(c.p)
				lat = append(lat, time.Since(t0))
				if err != nil || len(page.Jobs) == 0 {
					b.Fatalf("%d jobs, %v", len(page.Jobs), err)
				}
			}
			slices.Sort(lat)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
		})
	}
}

// BenchmarkHeartbeatWhileListing: a lease's Heartbeat latency while
// another goroutine lists a page of 1,000 jobs with 256 KiB checkpoints
// in a loop (listing), against the same Router with no lister (idle).
// Each sub-benchmark is one heartbeat loop lasting the benchtime (run it
// with -benchtime 5s, say). Reports the heartbeat's latency, max
// (hb-max-us), 99.99th percentile (hb-p9999-us; a histogram capped at
// 100 ms) and median (hb-p50-us), the heartbeats that took over 1 ms
// (hb-over-1ms), and the pages listed meanwhile (pages). Target: listing adds nothing
// that grows with checkpoints to a heartbeat's wait (the rule: admin reads
// copy no checkpoint under the lock).
//
//	go test -run '^$' -bench HeartbeatWhileListing -benchtime 5s .
func BenchmarkHeartbeatWhileListing(b *testing.B) {
	const n, size = 1000, 256 << 10
	for _, listing := range []bool{false, true} {
		name := "idle"
		if listing {
			name = "listing"
		}
		b.Run(name, func(b *testing.B) {
			r := benchRouter(b, Options{LeaseDuration: time.Hour})
			checkpoint := make([]byte, size)
			for i := range n {
				if err := r.Enqueue(fmt.Sprint(i), i); err != nil {
					b.Fatal(err)
				}
				l, err := r.TryAcquire("w")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Heartbeat(checkpoint); err != nil {
					b.Fatal(err)
				}
			}
			if err := r.Enqueue("hb", 0); err != nil {
				b.Fatal(err)
			}
			hl, err := r.TryAcquire("hb")
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			var stop atomic.Bool
			var pages atomic.Int64
			var wg sync.WaitGroup
			if listing {
				wg.Go(func() {
					for !stop.Load() {
						page, err := r.List(ListParams{Limit: MaxListLimit})
						if err != nil || len(page.Jobs) != MaxListLimit {
							b.Errorf("%d jobs, %v", len(page.Jobs), err)
							return
						}
						pages.Add(1)
					}
				})
			}
			lat := new(latencies)
			for b.Loop() {
				t0 := time.Now()
				if err := hl.Heartbeat(nil); err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(t0))
			}
			stop.Store(true)
			wg.Wait()
			us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
			b.ReportMetric(us(lat.max), "hb-max-us")
			b.ReportMetric(us(lat.quantile(0.9999)), "hb-p9999-us")
			b.ReportMetric(us(lat.quantile(0.5)), "hb-p50-us")
			b.ReportMetric(float64(lat.slow), "hb-over-1ms")
			b.ReportMetric(float64(pages.Load()), "pages")
		})
	}
}
