package leaserouter

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaserouter/leaserouter/internal/cputime"
)

// BenchmarkClientDrain: b.N no-op jobs, round robin over 10 kinds on one
// queue of a Client with 2 workers, drained (Start, Drained); then, in
// the same iteration, the same b.N jobs drained by one Router[int].Run
// with 2 workers, the same LeaseDuration, heartbeat interval and
// Retention: the baseline, measured alternately with the subject in one
// run. It reports client-jobs/s, run-jobs/s and their ratio, client/run
// (the target is >= 0.9), and the CPU time per job of each half with
// their ratio, cpu-run/client (the same target). Each handler counts its job in an atomic, as
// BenchmarkRun's does.
//
//	go test -run '^$' -bench ClientDrain -benchtime 1000000x -count 5 .
func BenchmarkClientDrain(b *testing.B) {
	const kinds = 10
	opts := Options{Retention: -1, LeaseDuration: time.Second}
	id := ids("j", b.N)
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()

	// The subject: a Client.
	c, err := NewClient(ClientOptions{Options: opts, Queues: map[string]QueueConfig{DefaultQueue: {Workers: 2}}})
	if err != nil {
		b.Fatal(err)
	}
	var ran atomic.Int64
	ks := make([]*Kind[int], kinds)
	for i := range ks {
		ks[i], err = Register(c, "kind"+strconv.Itoa(i), func(context.Context, *Lease[int]) error {
			ran.Add(1)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	for i, s := range id {
		if err := ks[i%kinds].Enqueue(ctx, s, 1); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	b.StartTimer()
	start, cpu := time.Now(), cputime.Process()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if err := c.Drained(ctx); err != nil {
		b.Fatal(err)
	}
	clientTook, clientCPU := time.Since(start), cputime.Process()-cpu
	b.StopTimer()
	if err := c.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	if ran.Load() != int64(b.N) {
		b.Fatalf("the Client ran %d jobs of %d", ran.Load(), b.N)
	}

	// The baseline: one Router[int].Run with the same workers.
	r := benchRouter(b, opts)
	for _, s := range id {
		if err := r.Enqueue(s, 1); err != nil {
			b.Fatal(err)
		}
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runtime.GC()
	b.StartTimer()
	start, cpu = time.Now(), cputime.Process()
	err = r.Run(rctx, WorkerOptions{Workers: 2}, func(context.Context, *Lease[int]) error {
		if left.Add(-1) == 0 {
			cancel()
		}
		return nil
	})
	runTook, runCPU := time.Since(start), cputime.Process()-cpu
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	client, run := float64(b.N)/clientTook.Seconds(), float64(b.N)/runTook.Seconds()
	b.ReportMetric(client, "client-jobs/s")
	b.ReportMetric(run, "run-jobs/s")
	b.ReportMetric(client/run, "client/run")
	// CPU time per job (the process's, GC included): steadier than the
	// rates on a machine shared with other work. Not reported where it
	// cannot be read (cpuTime is 0).
	if clientCPU <= 0 || runCPU <= 0 {
		return
	}
	b.ReportMetric(float64(clientCPU.Nanoseconds())/float64(b.N), "client-cpu-ns/job")
	b.ReportMetric(float64(runCPU.Nanoseconds())/float64(b.N), "run-cpu-ns/job")
	b.ReportMetric(float64(runCPU)/float64(clientCPU), "cpu-run/client")
}
