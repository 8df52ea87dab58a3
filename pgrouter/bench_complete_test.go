package pgrouter_test

import (
	"context"
	"testing"

	"github.com/leaserouter/leaserouter/pgrouter"
)

// BenchmarkAcquireComplete: b.N pre-enqueued jobs, each leased by
// TryAcquire and completed by Lease.Complete (lease_end.sql), one at a
// time: the success path of a single lease, reported as jobs/s and the
// WAL it writes per job (what a change to the columns every completion
// writes costs, compared in the same run).
func BenchmarkAcquireComplete(b *testing.B) {
	r, db := benchRouter(b, pgrouter.Options{Retention: -1})
	enqueueN(b, r, b.N)
	ctx := context.Background()
	b.ResetTimer()
	wal := walAt(b, db)
	for range b.N {
		l, err := r.TryAcquire(ctx, "w")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Complete(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(walAt(b, db)-wal)/float64(b.N), "wal-B/job")
}
