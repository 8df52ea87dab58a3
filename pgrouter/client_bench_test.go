package pgrouter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/cputime"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// BenchmarkClientDrain: b.N no-op jobs, round-robin over 10 kinds on
// one queue, drained by a Client (Workers 2, the default Batch, from
// Start until Drained returns), against the same number drained by one
// Router[int].Run with 2 workers (until Run returns, as BenchmarkRunMany),
// in the same invocation, each half on a fresh database (Retention -1
// both). It reports both rates and client/run (target >= 0.9), and each
// half's CPU a job, the server's (Linux) and this process's, which a
// busy machine disturbs less than the rates. Use a fixed count: -bench
// ClientDrain -benchtime 30000x -count 5.
func BenchmarkClientDrain(b *testing.B) {
	b.StopTimer()
	var run, client drainCPU
	run.rate = drainRun(b, b.N, &run)
	client.rate = drainClient(b, b.N, 10, &client)
	b.ReportMetric(run.rate, "run-jobs/s")
	b.ReportMetric(client.rate, "client-jobs/s")
	b.ReportMetric(client.rate/run.rate, "client/run")
	for _, h := range []struct {
		name string
		cpu  *drainCPU
	}{{"run", &run}, {"client", &client}} {
		b.ReportMetric(float64(h.cpu.server.Microseconds())/float64(b.N), h.name+"-server-cpu-us/job")
		b.ReportMetric(float64(h.cpu.process.Microseconds())/float64(b.N), h.name+"-proc-cpu-us/job")
	}
}

// drainCPU is one half's rate and the CPU its timed part took.
type drainCPU struct {
	rate            float64
	server, process time.Duration
	s0, p0          time.Duration
}

// start and stop bracket the timed part; a server whose CPU cannot be
// read (not Linux) counts 0, as does the process's where it cannot be
// (not Unix).
func (d *drainCPU) start(db *pgxpool.Pool) {
	d.s0, _ = cputime.Server(db.Config().ConnConfig.Host)
	d.p0 = cputime.Process()
}
func (d *drainCPU) stop(db *pgxpool.Pool) {
	s, _ := cputime.Server(db.Config().ConnConfig.Host)
	d.server, d.process = s-d.s0, cputime.Process()-d.p0
}

// analyzeBeforeTimer analyzes the jobs table once its backlog is in, in
// both halves alike. Otherwise the Router's own ANALYZE (due once 10,000
// rows changed, checked every second from New) lands where the enqueue's
// length puts it: before one half's timer (the Router's 1,000-row
// batches) and inside the other's (the Client's 100-row batches a kind),
// where it costs that half a table read and a replan of every statement.
// Inside both windows the Router still vacuums and analyzes what the
// drain itself changed, as it would in service.
func analyzeBeforeTimer(b *testing.B, db *pgxpool.Pool) {
	b.Helper()
	if _, err := db.Exec(context.Background(), "ANALYZE leaserouter_jobs"); err != nil {
		b.Fatal(err)
	}
}

// drainRun is BenchmarkRunMany's drain of n jobs, timed: jobs/s.
func drainRun(b *testing.B, n int, cpu *drainCPU) float64 {
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
	analyzeBeforeTimer(b, db)
	cpu.start(db)
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
	cpu.stop(db)
	if err != nil {
		b.Fatal(err)
	}
	return float64(n) / elapsed.Seconds()
}

// drainClient drains n jobs round-robin over k kinds of one Client queue
// (Workers 2), timed from Start until Drained returns: jobs/s.
func drainClient(b *testing.B, n, k int, cpu *drainCPU) float64 {
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
	analyzeBeforeTimer(b, db)
	cpu.start(db)
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
	cpu.stop(db)
	if got := ran.Load(); got != int64(n) {
		b.Fatalf("the Client ran %d jobs of %d", got, n)
	}
	return float64(n) / elapsed.Seconds()
}
