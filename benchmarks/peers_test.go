// Package benchmarks compares leaserouter with an in-process worker pool
// that has no leases, github.com/alitto/pond/v2, on the same end-to-end
// workload in the same run. It is a module of its own so that the core
// module depends on nothing.
//
//	cd benchmarks && go test -run XXX -bench . -count 5
//
// Each operation pushes peerJobs no-op jobs through 2 workers while one
// goroutine submits them, and reports jobs/s and the garbage collections
// per million jobs. Job IDs are made as a user would, with strconv.Itoa,
// in the submitting loop.
package benchmarks

import (
	"context"
	"runtime"
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
	pipeline(b, func() (int64, error) { return runPond(peerJobs), nil })
}

// BenchmarkRouterEnqueue: leaserouter's Run with 2 workers, while one
// goroutine enqueues every job with Enqueue; the operation ends when the
// last job is complete.
func BenchmarkRouterEnqueue(b *testing.B) { benchRouter(b, enqueueEach) }

// BenchmarkRouterEnqueueMany: as BenchmarkRouterEnqueue, enqueueing with
// EnqueueMany in batches of 256.
func BenchmarkRouterEnqueueMany(b *testing.B) { benchRouter(b, enqueueMany) }

// BenchmarkRouterBacklog: every job enqueued first, then Run with 2
// workers until the last is complete (both timed).
func BenchmarkRouterBacklog(b *testing.B) { benchRouter(b, nil) }

func benchRouter(b *testing.B, enqueue func(*leaserouter.Router[int], int) error) {
	pipeline(b, func() (int64, error) { return runRouter(peerJobs, enqueue) })
}

// TestPeerWorkloads runs each workload on a few jobs: every job is done
// once, on both sides.
func TestPeerWorkloads(t *testing.T) {
	const n = 10_000
	if got := runPond(n); got != n {
		t.Fatalf("pond ran %d tasks, want %d", got, n)
	}
	for name, enqueue := range map[string]func(*leaserouter.Router[int], int) error{
		"Enqueue": enqueueEach, "EnqueueMany": enqueueMany, "backlog": nil,
	} {
		got, err := runRouter(n, enqueue)
		if err != nil || got != n {
			t.Fatalf("%s: ran %d jobs (%v), want %d", name, got, err, n)
		}
	}
}

// runPond submits n no-op tasks to a new pond pool of peerWorkers while
// they run, waits for them and returns how many ran.
func runPond(n int) int64 {
	var done atomic.Int64
	task := func() { done.Add(1) }
	pool := pond.NewPool(peerWorkers)
	for range n {
		pool.Submit(task)
	}
	pool.StopAndWait()
	return done.Load()
}

// runRouter pushes n no-op jobs through a new Router (Retention -1:
// finished jobs are dropped at once, as a pool forgets its tasks) with Run
// and peerWorkers workers, and returns how many ran. With enqueue, Run's
// workers start first and enqueue runs beside them; without, every job is
// enqueued with Enqueue before Run starts.
func runRouter(n int, enqueue func(*leaserouter.Router[int], int) error) (int64, error) {
	r, err := leaserouter.New[int](leaserouter.Options{Retention: -1})
	if err != nil {
		return 0, err
	}
	defer r.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int64
	h := func(context.Context, *leaserouter.Lease[int]) error {
		if done.Add(1) == int64(n) {
			cancel()
		}
		return nil
	}
	if enqueue == nil {
		if err := enqueueEach(r, n); err != nil {
			return 0, err
		}
	}
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx, leaserouter.WorkerOptions{Workers: peerWorkers}, h) }()
	if enqueue != nil {
		if err := enqueue(r, n); err != nil {
			cancel()
			<-ran
			return done.Load(), err
		}
	}
	if err := <-ran; err != nil {
		return done.Load(), err
	}
	return done.Load(), r.Close(context.Background())
}

// enqueueEach enqueues jobs 0..n-1 with one Enqueue each.
func enqueueEach(r *leaserouter.Router[int], n int) error {
	for i := range n {
		if err := r.Enqueue(strconv.Itoa(i), i); err != nil {
			return err
		}
	}
	return nil
}

// enqueueMany enqueues jobs 0..n-1 with EnqueueMany, 256 at a time.
func enqueueMany(r *leaserouter.Router[int], n int) error {
	const batch = 256
	specs := make([]leaserouter.JobSpec[int], batch) // EnqueueMany does not retain it
	for i := 0; i < n; i += batch {
		b := specs[:min(batch, n-i)]
		for k := range b {
			b[k] = leaserouter.JobSpec[int]{ID: strconv.Itoa(i + k), Payload: i + k}
		}
		if _, err := r.EnqueueMany(b); err != nil {
			return err
		}
	}
	return nil
}

// pipeline calls run once an operation (run returns how many jobs it
// ran) and reports the jobs per second of the whole benchmark and the
// garbage collections the runtime finished meanwhile per million jobs
// (GCs/Mjobs; a collection that straddles the start or the end counts
// one either way). On this workload the live heap is small, so the
// collector runs about once per few megabytes allocated: its cycles follow
// each side's bytes a job (benchmarks/README.md).
func pipeline(b *testing.B, run func() (int64, error)) {
	gcs := numGC()
	var done int64
	for b.Loop() {
		n, err := run()
		if err != nil {
			b.Fatal(err)
		}
		done += n
	}
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "jobs/s")
	if done > 0 {
		b.ReportMetric(float64(numGC()-gcs)*1e6/float64(done), "GCs/Mjobs")
	}
}

// numGC is the number of garbage collections finished since the process
// started.
func numGC() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumGC
}
