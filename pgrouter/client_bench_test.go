package pgrouter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// BenchmarkClientDrain: b.N no-op jobs, round-robin over 10 kinds on
// one queue, drained by a Client (Workers 2, the default Batch, from
// Start until Drained returns), against the same number drained by one
// Router[int].Run with 2 workers (until Run returns, as BenchmarkRunMany),
// in the same invocation, each half on a fresh database (Retention -1
// both). It reports both rates and client/run (target >= 0.9). Use a
// fixed count: -bench ClientDrain -benchtime 30000x -count 5.
func BenchmarkClientDrain(b *testing.B) {
	b.StopTimer()
	run := drainRun(b, b.N)
	client := drainClient(b, b.N, 10)
	b.ReportMetric(run, "run-jobs/s")
	b.ReportMetric(client, "client-jobs/s")
	b.ReportMetric(client/run, "client/run")
}

// drainRun is BenchmarkRunMany's drain of n jobs, timed: jobs/s.
func drainRun(b *testing.B, n int) float64 {
	db := pgtest.New(b)
	r, err := pgrouter.New[int](context.Background(), db, pgrouter.Options{Retention: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(context.Background())
	enqueueN(b, r, n)
	var left atomic.Int64
	left.Store(int64(n))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.StartTimer()
	start := time.Now()
	err = r.Run(ctx, leaserouter.WorkerOptions{Workers: 2}, func(context.Context, *pgrouter.Lease[int]) error {
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
	return float64(n) / elapsed.Seconds()
}

// drainClient drains n jobs round-robin over k kinds of one Client queue
// (Workers 2), timed from Start until Drained returns: jobs/s.
func drainClient(b *testing.B, n, k int) float64 {
	db := pgtest.New(b)
	ctx := context.Background()
	c, err := pgrouter.NewClient(ctx, db, pgrouter.ClientOptions{Options: pgrouter.Options{Retention: -1},
		Queues: map[string]pgrouter.QueueConfig{pgrouter.DefaultQueue: {Workers: 2}}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop(ctx)
	var ran atomic.Int64
	kinds := make([]*pgrouter.Kind[int], k)
	specs := make([][]leaserouter.JobSpec[int], k)
	for i := range kinds {
		if kinds[i], err = pgrouter.Register(c, fmt.Sprint("kind-", i), func(context.Context, *pgrouter.Lease[int]) error {
			ran.Add(1)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	// Interleaved in enqueue order: batches of 100 a kind, in turn.
	for i := 0; i < n; i++ {
		kind := (i / 100) % k
		specs[kind] = append(specs[kind], leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i), Payload: i})
		if len(specs[kind]) == 100 || i == n-1 {
			if _, err := kinds[kind].EnqueueMany(ctx, specs[kind]); err != nil {
				b.Fatal(err)
			}
			specs[kind] = specs[kind][:0]
		}
	}
	for kind, s := range specs {
		if len(s) > 0 {
			if _, err := kinds[kind].EnqueueMany(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StartTimer()
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if err := c.Drained(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if got := ran.Load(); got != int64(n) {
		b.Fatalf("the Client ran %d jobs of %d", got, n)
	}
	return float64(n) / elapsed.Seconds()
}
