package console_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
)

// BenchmarkPagesAt1MJobs measures each page's server time with a million
// jobs in the router (the target: at most 100 ms each).
//
//	go test -run '^$' -bench PagesAt1MJobs -benchtime 20x ./console/
func BenchmarkPagesAt1MJobs(b *testing.B) {
	r, err := leaserouter.New[item](leaserouter.Options{LeaseDuration: 1 << 62})
	if err != nil {
		b.Fatal(err)
	}
	defer closeNow(r)
	const n = 1_000_000
	for i := range n {
		if err := r.Enqueue(fmt.Sprintf("job-%07d", i), item{Path: "/p"}); err != nil {
			b.Fatal(err)
		}
	}
	for range 1000 { // some leases and dead jobs among them
		l, err := r.TryAcquire("w")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Fail(leaserouter.Permanent(fmt.Errorf("bad"))); err != nil {
			b.Fatal(err)
		}
		if _, err := r.TryAcquire("w"); err != nil {
			b.Fatal(err)
		}
	}
	h, err := console.New(console.Options{}, console.Router("files", r))
	if err != nil {
		b.Fatal(err)
	}
	for _, target := range []string{"/", "/jobs", "/jobs?state=dead", "/jobs?state=canceled", "/jobs?prefix=job-05",
		"/jobs?limit=1000", "/job?queue=files&id=job-0500000", "/leases", "/dead"} {
		b.Run(target, func(b *testing.B) {
			for b.Loop() {
				w := serveGet(h, target)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d", target, w.Code)
				}
			}
		})
	}
}
