package pgrouter_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// Benchmarks against the throwaway server (fsync on), server and client
// on one machine. Targets (issue 12): RunMany >= 20,000 jobs/s, Run >=
// 1,500 jobs/s with RunMany >= 5x it, EnqueueMany >= 100,000 rows/s,
// RequeueLatency p99 <= LeaseDuration + 100ms.

// benchDB is a fresh database for a benchmark, without the indexes that
// LEASEROUTER_BENCH_DROP_INDEX names (comma-separated), if set: the
// write cost of an index (leaserouter_jobs_kind_list, say) is the
// difference between runs with it and without, alternated.
func benchDB(b *testing.B) *pgxpool.Pool {
	db := pgtest.New(b)
	for name := range strings.SplitSeq(os.Getenv("LEASEROUTER_BENCH_DROP_INDEX"), ",") {
		if name == "" {
			continue
		}
		if _, err := db.Exec(context.Background(), "DROP INDEX "+pgx.Identifier{name}.Sanitize()); err != nil {
			b.Fatal(err)
		}
	}
	return db
}

// benchRouter is a Router of ints with opts on a fresh benchDB, closed
// when the benchmark ends.
func benchRouter(b *testing.B, opts pgrouter.Options) (*pgrouter.Router[int], *pgxpool.Pool) {
	db := benchDB(b)
	r, err := pgrouter.New[int](context.Background(), db, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close(context.Background()) })
	return r, db
}

// walAt is the server's current WAL position, in bytes.
func walAt(b *testing.B, db *pgxpool.Pool) int64 {
	var at int64
	if err := db.QueryRow(context.Background(), "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").Scan(&at); err != nil {
		b.Fatal(err)
	}
	return at
}

// enqueueN enqueues n no-op jobs in batches of 1000.
func enqueueN(b *testing.B, r *pgrouter.Router[int], n int) {
	b.Helper()
	specs := make([]leaserouter.JobSpec[int], 0, 1000)
	for i := 0; i < n; i++ {
		specs = append(specs, leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i), Payload: i})
		if len(specs) == cap(specs) || i == n-1 {
			if _, err := r.EnqueueMany(context.Background(), specs); err != nil {
				b.Fatal(err)
			}
			specs = specs[:0]
		}
	}
}

// benchRun runs b.N pre-enqueued no-op jobs through Run with 2 workers
// and the given batch ceiling, and reports jobs/s.
func benchRun(b *testing.B, batch int) {
	r, db := benchRouter(b, pgrouter.Options{Retention: -1})
	enqueueN(b, r, b.N)
	var left atomic.Int64
	left.Store(int64(b.N))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ResetTimer()
	wal := walAt(b, db)
	start := time.Now()
	err := r.Run(ctx, leaserouter.WorkerOptions{Workers: 2, Batch: batch}, func(context.Context, *pgrouter.Lease[int]) error {
		if left.Add(-1) == 0 {
			cancel()
		}
		return nil
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	// The index writes, which CPU time on a shared machine hides in its noise.
	b.ReportMetric(float64(walAt(b, db)-wal)/float64(b.N), "wal-B/job")
}

// BenchmarkRun: single claims (Batch 1), 2 workers.
func BenchmarkRun(b *testing.B) { benchRun(b, 1) }

// BenchmarkRunMany: batched claims and completions (the default Batch
// ceiling), 2 workers. Its completions go through leases_end.sql, whose
// shape this measured: a custom plan of it took about 300 us to make,
// several times its execution (hence one generic plan per connection),
// and with a predicate on the state in its update the partial index of
// leased rows was scanned for every row, ~90 us a row at batches of 256.
func BenchmarkRunMany(b *testing.B) { benchRun(b, 0) }

// BenchmarkEnqueueMany: batches of 1000 jobs, reports rows/s.
func BenchmarkEnqueueMany(b *testing.B) {
	r, db := benchRouter(b, pgrouter.Options{})
	b.ResetTimer()
	wal := walAt(b, db)
	start := time.Now()
	enqueueN(b, r, b.N)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
	b.ReportMetric(float64(walAt(b, db)-wal)/float64(b.N), "wal-B/row")
}

// BenchmarkEnqueue: one job a call (Enqueue, its own round trip and
// transaction), reports rows/s and the WAL each writes.
func BenchmarkEnqueue(b *testing.B) {
	r, db := benchRouter(b, pgrouter.Options{})
	ctx := context.Background()
	wal := walAt(b, db)
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		if err := r.Enqueue(ctx, fmt.Sprint("e", i), i); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
	b.ReportMetric(float64(walAt(b, db)-wal)/float64(b.N), "wal-B/row")
}

// BenchmarkRequeueLatency: a lease abandoned at its grant; the time until
// the job is leased again by an Acquire already waiting, p99 in ms, with
// LeaseDuration 200ms (target: <= 300ms).
func BenchmarkRequeueLatency(b *testing.B) {
	const lease = 200 * time.Millisecond
	db := pgtest.New(b)
	r, err := pgrouter.New[int](context.Background(), db, pgrouter.Options{LeaseDuration: lease, Retention: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(context.Background())
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	for i := 0; b.Loop(); i++ {
		if err := r.Enqueue(ctx, fmt.Sprint("j", i), i); err != nil {
			b.Fatal(err)
		}
		abandoned := time.Now()
		if _, err := r.TryAcquire(ctx, "crashed"); err != nil {
			b.Fatal(err)
		}
		l, err := r.Acquire(ctx, "rescuer")
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(abandoned))
		if err := l.Complete(ctx); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100])/float64(time.Millisecond), "p99-ms")
}
