// Package benchmarks compares leaserouter with an in-process worker pool
// that has no leases, github.com/alitto/pond/v2, on the same end-to-end
// workload in the same run. It is a module of its own so that the core
// module depends on nothing.
//
//	cd benchmarks && go test -run XXX -bench . -count 5
//
// Each operation pushes peerJobs no-op jobs through 2 workers while one
// goroutine submits them, and reports jobs/s. Job IDs are made as a user
// would, with strconv.Itoa, in the submitting loop.
package benchmarks

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/alitto/pond/v2"
	"github.com/leaserouter/leaserouter"
)

// peerJobs is the number of jobs per operation; peerWorkers the number of
// workers on both sides.
const (
	peerJobs    = 1_000_000
	peerWorkers = 2
)

// BenchmarkPond: pond v2 with 2 workers; Submit of every job while they
// run, then StopAndWait.
func BenchmarkPond(b *testing.B) {
	var done atomic.Int64
	task := func() { done.Add(1) }
	for b.Loop() {
		pool := pond.NewPool(peerWorkers)
		for range peerJobs {
			pool.Submit(task)
		}
		pool.StopAndWait()
	}
	report(b, done.Load())
}

// BenchmarkRouterEnqueue: leaserouter's Run with 2 workers, while one
// goroutine enqueues every job with Enqueue; the operation ends when the
// last job is complete.
func BenchmarkRouterEnqueue(b *testing.B) {
	benchRouter(b, func(r *leaserouter.Router[int]) error {
		for i := range peerJobs {
			if err := r.Enqueue(strconv.Itoa(i), i); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkRouterEnqueueMany: as BenchmarkRouterEnqueue, enqueueing with
// EnqueueMany in batches of enqueueBatch.
func BenchmarkRouterEnqueueMany(b *testing.B) {
	const enqueueBatch = 256
	benchRouter(b, func(r *leaserouter.Router[int]) error {
		specs := make([]leaserouter.JobSpec[int], enqueueBatch) // EnqueueMany does not retain it
		for i := 0; i < peerJobs; i += enqueueBatch {
			batch := specs[:min(enqueueBatch, peerJobs-i)]
			for k := range batch {
				batch[k] = leaserouter.JobSpec[int]{ID: strconv.Itoa(i + k), Payload: i + k}
			}
			if _, err := r.EnqueueMany(batch); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkRouterBacklog: every job enqueued first, then Run with 2
// workers until the last is complete (both timed).
func BenchmarkRouterBacklog(b *testing.B) {
	benchRouter(b, nil)
}

// benchRouter runs each operation on a new Router (Retention -1: finished
// jobs are dropped at once, as a pool forgets its tasks). With enqueue,
// Run's workers start first and enqueue runs beside them; without, every
// job is enqueued with Enqueue before Run starts.
func benchRouter(b *testing.B, enqueue func(*leaserouter.Router[int]) error) {
	var done atomic.Int64
	for b.Loop() {
		r, err := leaserouter.New[int](leaserouter.Options{Retention: -1})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var left atomic.Int64
		left.Store(peerJobs)
		h := func(context.Context, *leaserouter.Lease[int]) error {
			done.Add(1)
			if left.Add(-1) == 0 {
				cancel()
			}
			return nil
		}
		if enqueue == nil {
			for i := range peerJobs {
				if err := r.Enqueue(strconv.Itoa(i), i); err != nil {
					b.Fatal(err)
				}
			}
		}
		ran := make(chan error, 1)
		go func() { ran <- r.Run(ctx, leaserouter.WorkerOptions{Workers: peerWorkers}, h) }()
		if enqueue != nil {
			if err := enqueue(r); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
		cancel()
		if err := r.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	report(b, done.Load())
}

// report gives the jobs per second of the whole benchmark.
func report(b *testing.B, jobs int64) {
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
}
