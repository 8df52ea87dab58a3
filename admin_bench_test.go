package leaserouter

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkList: a page of 100 of List on a Router holding 1,000,000 jobs
// (env-free: always 1M), 990,000 succeeded and 10,000 dead spread among
// them, for the console's jobs and dead pages: the first page and a page
// from the middle (by its cursor), unfiltered, of the dead, and by an ID
// prefix matching one job in a thousand. Reports ms per page, p50 and
// p99. Target (DESIGN-operate): <= 100 ms.
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
	dead := []State{StateFailed}
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
