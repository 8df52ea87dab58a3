package pgrouter_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/cputime"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// BenchmarkProcesses: many OS processes on one queue. b.N no-op jobs
// (Retention -1) are enqueued, then drained by P child processes (this
// test binary run again, see procsChild), each one Router with a pool of
// its own running Run with 2 workers and the default Batch, first with
// P=1, then with P=4, each on a fresh database. It reports the jobs/s of
// each (from the children's start signal until no job is pending or
// leased), their ratio, and the children's CPU time per job.
// LEASEROUTER_PROCS_ONLY=<P> runs P processes only. Use a fixed count, as the process start-up is
// not timed but costs: -bench Processes -benchtime 30000x (-count for
// alternating runs). LEASEROUTER_PROCS_CPUPROFILE=<dir> writes each
// child's CPU profile there (<dir>/p<P>-<i>.prof). With
// LEASEROUTER_PROCS_CLIENT=1 each child is a Client instead, one kind on
// one queue, Workers 2 (the jobs enqueued through that kind). It also
// reports the server's CPU time per job (its processes', from /proc:
// the postmaster's and its children's, those that exited included) and
// cpu-busy, the CPU time of server and children over the wall time of
// both cores: near 1, the machine is the bound.
func BenchmarkProcesses(b *testing.B) {
	b.StopTimer()
	if only := os.Getenv(envProcsOnly); only != "" { // one configuration, for profiling
		p, err := strconv.Atoi(only)
		if err != nil || p < 1 {
			b.Fatalf("%s=%q: want a count of processes", envProcsOnly, only)
		}
		m := procsRun(b, p, b.N, false)
		b.ReportMetric(m.rate, fmt.Sprintf("p%d-jobs/s", p))
		b.ReportMetric(m.cpu, fmt.Sprintf("p%d-cpu-us/job", p))
		b.ReportMetric(m.server, fmt.Sprintf("p%d-server-cpu-us/job", p))
		return
	}
	procsCompare(b, false)
}

// procsCompare drains b.N jobs with 1 process, then with 4, and reports
// both rates, their ratio and the children's CPU time per job (floor:
// on the floor's table).
func procsCompare(b *testing.B, floor bool) {
	one := procsRun(b, 1, b.N, floor)
	four := procsRun(b, 4, b.N, floor)
	b.ReportMetric(one.rate, "p1-jobs/s")
	b.ReportMetric(four.rate, "p4-jobs/s")
	b.ReportMetric(four.rate/one.rate, "p4/p1")
	b.ReportMetric(one.cpu, "p1-cpu-us/job")
	b.ReportMetric(four.cpu, "p4-cpu-us/job")
	b.ReportMetric(one.server, "p1-server-cpu-us/job")
	b.ReportMetric(four.server, "p4-server-cpu-us/job")
	b.ReportMetric(one.busy, "p1-cpu-busy")
	b.ReportMetric(four.busy, "p4-cpu-busy")
}

// procsMeasure is what procsRun measured: jobs/s, the children's and the
// server's CPU time per job in microseconds, and the share of both cores
// their CPU time took over the drain (start-up of the children
// included).
type procsMeasure struct{ rate, cpu, server, busy float64 }

// BenchmarkProcessesFloor is BenchmarkProcesses on the least queue that
// keeps the shape of Run's round trips: a bare table (a bigserial key, a
// state, a ready time, a payload; a partial index on the ready order of
// pending rows) drained by the same child processes, 2 goroutines each,
// each round trip one transaction that deletes the goroutine's previous
// batch and claims up to 256 pending rows in ready order (FOR UPDATE SKIP
// LOCKED, made leased). No tokens, no lease check, no settling, no
// heartbeats. Its p4/p1 is what PostgreSQL itself does with 8 claimers in
// 4 processes against 2 in one on this machine: the floor under
// BenchmarkProcesses' ratio.
//
//	go test -run '^$' -bench ProcessesFloor -benchtime 200000x -count 3 ./pgrouter/
func BenchmarkProcessesFloor(b *testing.B) {
	b.StopTimer()
	procsCompare(b, true)
}

// The floor's table and statements (BenchmarkProcessesFloor).
const (
	floorTable = `CREATE TABLE floor_jobs (
		id bigserial PRIMARY KEY, state smallint NOT NULL DEFAULT 0,
		ready_at timestamptz NOT NULL DEFAULT clock_timestamp(), payload jsonb NOT NULL);
	CREATE INDEX floor_jobs_ready ON floor_jobs (ready_at, id) WHERE state = 0`
	floorEnqueue = `INSERT INTO floor_jobs (payload) SELECT to_jsonb(g) FROM generate_series(1, $1) g`
	floorClaim   = `UPDATE floor_jobs j SET state = 1 FROM (SELECT id FROM floor_jobs WHERE state = 0
		ORDER BY ready_at, id LIMIT 256 FOR UPDATE SKIP LOCKED) p WHERE j.id = p.id RETURNING j.id, j.payload`
	floorDelete = `DELETE FROM floor_jobs WHERE id = ANY($1)`
	floorLeft   = `SELECT EXISTS (SELECT FROM floor_jobs)`
)

// The environment of a child of BenchmarkProcesses (see procsChild).
const (
	envProcsChild   = "LEASEROUTER_PROCS_CHILD"      // the database's connection string: this process is a child
	envProcsProfile = "LEASEROUTER_PROCS_CPUPROFILE" // a file for the child's CPU profile (the parent: a directory)
	envProcsOnly    = "LEASEROUTER_PROCS_ONLY"       // the parent: run this many processes only, no ratio
	envProcsFloor   = "LEASEROUTER_PROCS_FLOOR"      // the child drains the floor's table (BenchmarkProcessesFloor)
	envProcsClient  = "LEASEROUTER_PROCS_CLIENT"     // each child is a Client (one kind, one queue), not a Router
)

// procsKind is the one kind of the Client children (LEASEROUTER_PROCS_CLIENT).
const procsKind = "noop"

// procsLimit bounds a child's life, whatever its parent does.
const procsLimit = 5 * time.Minute

// procsRun enqueues n no-op jobs on a fresh database, drains them with p
// child processes started at once, and returns the jobs/s (from the
// start signal until the last child's Run returned, once the children
// together had run n jobs: their completions committed) and the
// children's CPU time (user and system, start-up included) per job in
// microseconds. Every child has exited (or was killed) when it returns.
func procsRun(b *testing.B, p, n int, floor bool) procsMeasure {
	b.Helper()
	db := pgtest.New(b)
	if floor {
		if _, err := db.Exec(context.Background(), floorTable); err != nil {
			b.Fatal(err)
		}
		if _, err := db.Exec(context.Background(), floorEnqueue, n); err != nil {
			b.Fatal(err)
		}
	} else if os.Getenv(envProcsClient) != "" {
		enqueueKind(b, db, n)
	} else {
		r, err := pgrouter.New[int](context.Background(), db, pgrouter.Options{Retention: -1})
		if err != nil {
			b.Fatal(err)
		}
		enqueueN(b, r, n)
		// Closed before the children start: its maintenance loop and
		// listener would be one more process's.
		if err := r.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), procsLimit)
	defer cancel()

	dsn := childDSN(db)
	children := make([]*child, p)
	b.Cleanup(func() { // whatever happened: none outlives the benchmark
		for _, c := range children {
			if c != nil {
				c.kill()
			}
		}
	})
	for i := range children {
		c, err := startProcsChild(ctx, dsn, fmt.Sprintf("p%d-%d", p, i), floor)
		if err != nil {
			b.Fatal(err)
		}
		children[i] = c
	}
	for _, c := range children {
		if err := c.expect("ready"); err != nil {
			b.Fatal(err)
		}
	}
	type report struct {
		i, count int
		final    bool
		err      error
	}
	reports := make(chan report, p)
	server0, serr := cputime.Server(db.Config().ConnConfig.Host)
	start := time.Now()
	b.StartTimer()
	for i, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				k, final, err := c.progress()
				reports <- report{i, k, final, err}
				if final || err != nil {
					return
				}
			}
		}()
	}
	counts := make([]int, p)
	sum := func() (t int) {
		for _, k := range counts {
			t += k
		}
		return t
	}
	for finals, stopped := 0, false; finals < p; {
		var rep report
		select {
		case rep = <-reports:
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
		if rep.err != nil {
			b.Fatal(rep.err)
		}
		counts[rep.i] = rep.count
		if rep.final {
			finals++
		}
		if !stopped && sum() >= n {
			stopped = true
			for _, c := range children {
				_ = c.stdin.Close() // the children's signal to stop
			}
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	server1, serr1 := cputime.Server(db.Config().ConnConfig.Host)
	if serr == nil {
		serr = serr1
	}
	cpu := time.Duration(0)
	for _, c := range children {
		if err := c.wait(); err != nil {
			b.Fatal(err)
		}
		cpu += c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()
	}
	if got := sum(); got < n {
		b.Fatalf("P=%d: the children ran %d jobs of %d", p, got, n)
	}
	var left bool
	query := `SELECT EXISTS (SELECT FROM leaserouter_jobs WHERE state IN ('pending', 'leased'))`
	if floor {
		query = floorLeft
	}
	if err := db.QueryRow(ctx, query).Scan(&left); err != nil {
		b.Fatal(err)
	}
	if left {
		b.Fatalf("P=%d: jobs left pending or leased", p)
	}
	m := procsMeasure{rate: float64(n) / elapsed.Seconds(), cpu: float64(cpu.Microseconds()) / float64(n)}
	if serr == nil {
		server := server1 - server0
		m.server = float64(server.Microseconds()) / float64(n)
		m.busy = (server + cpu).Seconds() / (float64(runtime.NumCPU()) * elapsed.Seconds())
	} else {
		b.Logf("server CPU not measured: %v", serr)
	}
	return m
}

// enqueueKind enqueues n no-op jobs of procsKind, in batches of 1000,
// through a Client not started.
func enqueueKind(b *testing.B, db *pgxpool.Pool, n int) {
	b.Helper()
	ctx := context.Background()
	c, err := pgrouter.NewClient(ctx, db, pgrouter.ClientOptions{Options: pgrouter.Options{Retention: -1}})
	if err != nil {
		b.Fatal(err)
	}
	// Stopped before the children start: its loops and listener would be
	// one more process's.
	defer c.Stop(ctx)
	k, err := pgrouter.Register(c, procsKind, func(context.Context, *pgrouter.Lease[int]) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	specs := make([]leaserouter.JobSpec[int], 0, 1000)
	for i := 0; i < n; i++ {
		specs = append(specs, leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i), Payload: i})
		if len(specs) == cap(specs) || i == n-1 {
			if _, err := k.EnqueueMany(ctx, specs); err != nil {
				b.Fatal(err)
			}
			specs = specs[:0]
		}
	}
}

// startProcsChild starts a child of BenchmarkProcesses (procsChild) on
// the database dsn; name names its CPU profile. It says "ready" on stdout
// once its Router is up, starts Run at a line on stdin, says how many
// jobs it has run as that changes ("+<count>", every 2ms at most), stops
// at stdin's end, and says how many it ran once Run returned
// ("=<count>").
func startProcsChild(ctx context.Context, dsn, name string, floor bool) (*child, error) {
	env := []string{envProcsChild + "=" + dsn}
	if floor {
		env = append(env, envProcsFloor+"=1")
	}
	if dir := os.Getenv(envProcsProfile); dir != "" {
		env = append(env, envProcsProfile+"="+dir+"/"+name+".prof")
	}
	return startChild(ctx, env...)
}

// progress reads the child's next report: how many jobs it has run,
// and whether that is final (its Run returned).
func (c *child) progress() (int, bool, error) {
	if !c.out.Scan() {
		return 0, false, fmt.Errorf("child %d: no count: %v", c.cmd.Process.Pid, c.out.Err())
	}
	line := c.out.Text()
	final := strings.HasPrefix(line, "=")
	k, err := strconv.Atoi(strings.TrimLeft(line, "=+"))
	if err != nil {
		return 0, false, fmt.Errorf("child %d: %q: %v", c.cmd.Process.Pid, line, err)
	}
	return k, final, nil
}

// procsChild is a child process of BenchmarkProcesses (see
// startProcsChild), on the database dsn; it returns the exit code. It
// stops at stdin's end (its parent stopped it, or died) or after
// procsLimit.
func procsChild(dsn string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "procs child:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), procsLimit)
	defer cancel()
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	floor := os.Getenv(envProcsFloor) != ""
	var handled atomic.Int64
	var r *pgrouter.Router[int]
	var c *pgrouter.Client
	switch {
	case floor: // the floor's children have no Router, nor its loops
	case os.Getenv(envProcsClient) != "":
		if c, err = pgrouter.NewClient(ctx, db, pgrouter.ClientOptions{Options: pgrouter.Options{Retention: -1},
			Queues: map[string]pgrouter.QueueConfig{pgrouter.DefaultQueue: {Workers: 2}}}); err != nil {
			return fail(err)
		}
		defer c.Stop(context.Background())
		if _, err := pgrouter.Register(c, procsKind, func(context.Context, *pgrouter.Lease[int]) error {
			handled.Add(1)
			return nil
		}); err != nil {
			return fail(err)
		}
	default:
		if r, err = pgrouter.New[int](ctx, db, pgrouter.Options{Retention: -1}); err != nil {
			return fail(err)
		}
		defer r.Close(context.Background())
	}
	if path := os.Getenv(envProcsProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return fail(fmt.Errorf("no start line: %v", in.Err()))
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		for in.Scan() {
		}
		stop()
	}()
	ticks := time.NewTicker(2 * time.Millisecond)
	defer ticks.Stop()
	reported := make(chan struct{})
	go func() { // "+<count>" as it changes
		defer close(reported)
		last := int64(0)
		for {
			select {
			case <-runCtx.Done():
				return
			case <-ticks.C:
			}
			if k := handled.Load(); k != last {
				last = k
				fmt.Printf("+%d\n", k)
			}
		}
	}()
	switch {
	case floor:
		err = floorDrain(runCtx, db, &handled)
	case c != nil:
		// Start, then Stop at stdin's end: Stop returns once the handlers
		// have returned and the completions are committed, as Run does.
		if err = c.Start(runCtx); err == nil {
			<-runCtx.Done()
			err = c.Stop(context.Background())
		}
	default:
		err = r.Run(runCtx, leaserouter.WorkerOptions{Workers: 2}, func(context.Context, *pgrouter.Lease[int]) error {
			handled.Add(1)
			return nil
		})
	}
	stop()
	<-reported
	if err != nil {
		return fail(err)
	}
	fmt.Printf("=%d\n", handled.Load()) // Run returned: its completions are committed
	return 0
}

// floorDrain drains the floor's table with 2 goroutines until ctx is
// done, counting the jobs claimed in handled: each round trip deletes the
// goroutine's previous batch and claims the next in one transaction (a
// round trip in flight when ctx ends is finished, not canceled). The last
// batch is deleted before it returns.
func floorDrain(ctx context.Context, db *pgxpool.Pool, handled *atomic.Int64) error {
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = floorWorker(ctx, db, handled) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// floorWorker is one goroutine of floorDrain.
func floorWorker(ctx context.Context, db *pgxpool.Pool, handled *atomic.Int64) error {
	var prev []int64
	for {
		var b pgx.Batch
		if len(prev) > 0 {
			b.Queue(floorDelete, prev)
		}
		if ctx.Err() != nil {
			if len(prev) == 0 {
				return nil
			}
			return db.SendBatch(context.Background(), &b).Close()
		}
		b.Queue(floorClaim)
		res := db.SendBatch(context.Background(), &b)
		var err error
		if len(prev) > 0 {
			_, err = res.Exec()
		}
		prev = prev[:0]
		if err == nil {
			var rows pgx.Rows
			if rows, err = res.Query(); err == nil {
				for rows.Next() {
					var id int64
					var payload int
					if err = rows.Scan(&id, &payload); err != nil {
						break
					}
					prev = append(prev, id)
				}
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
		}
		if cerr := res.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		handled.Add(int64(len(prev)))
	}
}
