package pgrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// timePages logs and reports p50/p99 server time of GET target on h over
// runs requests each.
func timePages(b *testing.B, h http.Handler, runs int, phase string, targets ...string) {
	b.Helper()
	for _, target := range targets {
		var l latencies
		for range runs {
			w := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
			l = append(l, time.Since(start))
			if w.Code != http.StatusOK {
				b.Fatalf("%s: %d %s", target, w.Code, w.Body)
			}
		}
		slices.Sort(l)
		b.Logf("%s %-45s p50 %7.2fms p99 %7.2fms", phase, target, ms(l.q(0.5)), ms(l.q(0.99)))
		b.ReportMetric(ms(l.q(0.5)), phase+target+"-p50-ms")
	}
}

// BenchmarkConsoleBigPayloads measures the console's list pages over
// pgrouter with 1,000 jobs of 256 KB payloads (300 pending, 300 leased
// with 256 KB checkpoints, 400 dead): p50/p99 of 5 requests a page.
//
//	LEASEROUTER_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkConsoleBigPayloads -benchtime 1x ./pgrouter/
func BenchmarkConsoleBigPayloads(b *testing.B) {
	ctx := context.Background()
	db := pgtest.New(b)
	r, err := pgrouter.New[json.RawMessage](ctx, db, pgrouter.Options{MaxAttempts: 1, LeaseDuration: time.Hour,
		Retention: 24 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		done, cancel := context.WithCancel(ctx)
		cancel() // the leases still held are revoked, not waited for
		_ = r.Close(done)
	}()
	big := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = 'a' + byte(rand.IntN(26)) // little for TOAST's compression to take
		}
		return p
	}
	specs := make([]leaserouter.JobSpec[json.RawMessage], 0, 100)
	for i := range 1000 {
		payload, _ := json.Marshal(string(big(256 << 10)))
		specs = append(specs, leaserouter.JobSpec[json.RawMessage]{ID: fmt.Sprintf("job-%04d", i), Payload: payload})
		if len(specs) == cap(specs) {
			if _, err := r.EnqueueMany(ctx, specs); err != nil {
				b.Fatal(err)
			}
			specs = specs[:0]
		}
	}
	for i := range 700 {
		l, err := r.TryAcquire(ctx, "w")
		if err != nil {
			b.Fatal(err)
		}
		if i < 400 {
			err = l.Fail(ctx, leaserouter.Permanent(fmt.Errorf("bad %d", i)))
		} else {
			err = l.Heartbeat(ctx, big(256<<10))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	execSQL(b, db, "VACUUM ANALYZE leaserouter_jobs")
	h, err := console.New(console.Options{}, r)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		timePages(b, h, 5, "", "/jobs?queue=default", "/jobs?queue=default&limit=1000", "/leases",
			"/leases?limit=1000", "/dead?queue=default", "/job?queue=default&id=job-0500")
	}
}
