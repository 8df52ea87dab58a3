package benchmarks

// The database-backed comparison: pgrouter and River
// (github.com/riverqueue/river with riverpgxv5), on the same kind of
// server (a throwaway PostgreSQL cluster from pgrouter/pgtest, fsync on,
// server and client on one machine), in the same run:
//
//	cd benchmarks && go test -run XXX -bench 'Pgrouter|River' -benchtime 20000x -count 3
//
// Each side gets b.N no-op jobs enqueued in batches before it starts;
// jobs/s is from the start of its workers to the last job completed
// (committed). pgrouter runs with its defaults (2 workers, batched claims,
// completions with the next claim), at the default Retention and at -1
// (finished rows also deleted during the run). River runs at each of riverMaxWorkers
// (a River queue fetches at most MaxWorkers jobs a round, so 2 workers cap
// it; River's own examples use 100), tuned for throughput (fetch cooldown
// and poll interval at their 1ms minimum, completions flushed by its
// batch completer): compare pgrouter with River's best. Both report the
// statements they sent and the WAL written per job (cost_test.go).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// dbWorkers is the number of pgrouter's workers (its default).
const dbWorkers = 2

// riverMaxWorkers are the River configurations measured: pgrouter's
// worker count, River's documented 100, and 1000.
var riverMaxWorkers = []int{2, 100, 1000}

// BenchmarkPgrouterRunMany: pgrouter's Run, 2 workers, default batching,
// finished jobs kept for the default Retention (as River keeps its
// completed jobs for a day by default) and dropped at once (Retention
// -1: each job is also deleted during the run).
func BenchmarkPgrouterRunMany(b *testing.B) {
	for _, retention := range pgrouterRetentions {
		b.Run(retention.name, func(b *testing.B) {
			b.ReportMetric(pgrouterJobs(b, b.N, retention.d), "jobs/s")
		})
	}
}

// pgrouterRetentions are the Retention settings pgrouter runs at.
var pgrouterRetentions = []struct {
	name string
	d    time.Duration
}{{"Retention=default", 0}, {"Retention=-1", -1}}

// BenchmarkRiver: River v0.51.1, one queue, at each of riverMaxWorkers,
// tuned for throughput.
func BenchmarkRiver(b *testing.B) {
	for _, w := range riverMaxWorkers {
		b.Run(fmt.Sprint("MaxWorkers=", w), func(b *testing.B) {
			b.ReportMetric(riverJobs(b, b.N, w), "jobs/s")
		})
	}
}

// TestDatabaseWorkloads runs both database-backed sides on a few jobs,
// River in each configuration, so the suite checks the comparison works
// (every job completed).
func TestDatabaseWorkloads(t *testing.T) {
	runs := map[string]func(testing.TB, int) float64{}
	for _, retention := range pgrouterRetentions {
		runs["pgrouter/"+retention.name] = func(tb testing.TB, n int) float64 { return pgrouterJobs(tb, n, retention.d) }
	}
	for _, w := range riverMaxWorkers {
		runs[fmt.Sprint("river/MaxWorkers=", w)] = func(tb testing.TB, n int) float64 { return riverJobs(tb, n, w) }
	}
	for name, run := range runs {
		t.Run(name, func(t *testing.T) {
			if rate := run(t, 300); rate <= 0 {
				t.Fatalf("%s: %v jobs/s", name, rate)
			}
		})
	}
}

// pgrouterJobs enqueues n no-op jobs, runs them through pgrouter's Run
// with 2 workers and the given Retention, and returns jobs/s from the
// start of Run to its return (every job completed).
func pgrouterJobs(b testing.TB, n int, retention time.Duration) float64 {
	m := &costMeter{tb: b}
	return pgrouterRate(b, m.traced(pgtest.New(b)), n, retention, m)
}

// pgrouterRate is pgrouterJobs on db, with m (if not nil) measuring the
// drain.
func pgrouterRate(b testing.TB, db *pgxpool.Pool, n int, retention time.Duration, m window) float64 {
	ctx := context.Background()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{Retention: retention})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	if err := enqueueSpecs(ctx, r, n); err != nil {
		b.Fatal(err)
	}
	resetTimer(b)
	if m != nil {
		m.start()
	}
	elapsed := pgrouterDrain(b, r, n)
	if m != nil {
		m.stop(n)
	}
	return float64(n) / elapsed.Seconds()
}

// pgrouterDrain runs r's n pending jobs through Run with dbWorkers
// workers (no-op handler), waits until none is left unfinished, and
// returns the time from the start of Run to its return.
func pgrouterDrain(b testing.TB, r *pgrouter.Router[int], n int) time.Duration {
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(n))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	err := r.Run(rctx, leaserouter.WorkerOptions{Workers: dbWorkers}, func(context.Context, *pgrouter.Lease[int]) error {
		if left.Add(-1) == 0 {
			cancel() // Run completes the last jobs as it stops
		}
		return nil
	})
	elapsed := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	// A stopping Run's last round trips have a short grace; what they
	// did not complete by then (on a busy machine, the last batch) the
	// Router completes in its background after Run returns: wait for it.
	for deadline := time.Now().Add(time.Minute); ; {
		st, err := r.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		left := st.Pending + st.Leased + st.Scheduled
		if left == 0 {
			return elapsed
		}
		if time.Now().After(deadline) {
			b.Fatalf("pgrouter left %d jobs unfinished a minute after Run returned", left)
		}
		time.Sleep(10 * time.Millisecond) // the Router's background completions
	}
}

// resetTimer resets a benchmark's timer, to leave the setup out.
func resetTimer(tb testing.TB) {
	if b, ok := tb.(*testing.B); ok {
		b.ResetTimer()
	}
}

// noopArgs is River's job: nothing to do.
type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverJobs inserts n no-op jobs, runs them with River (one queue of
// maxWorkers, tuned for throughput), and returns jobs/s from the client's
// start to the last job's completion event.
func riverJobs(b testing.TB, n, maxWorkers int) float64 {
	m := &costMeter{tb: b}
	return riverRate(b, m.traced(pgtest.New(b)), n, maxWorkers, m)
}

// riverRate is riverJobs on db, with m (if not nil) measuring the drain.
func riverRate(b testing.TB, db *pgxpool.Pool, n, maxWorkers int, m window) float64 {
	client := newRiver(b, db, maxWorkers)
	riverInsert(b, client, n)
	resetTimer(b)
	if m != nil {
		m.start()
	}
	elapsed := riverDrain(b, client, n)
	if m != nil {
		m.stop(n)
	}
	riverStop(b, client)
	return float64(n) / elapsed.Seconds()
}

// newRiver installs River's schema on db's database and returns a client
// on it with one queue of maxWorkers, tuned for throughput (fetch
// cooldown and poll interval at their 1 ms minimum), not started.
func newRiver(b testing.TB, db *pgxpool.Pool, maxWorkers int) *river.Client[pgx.Tx] {
	if err := riverMigrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(db), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	return client
}

// enqueueBatch is the number of jobs a River InsertMany (riverInsert)
// and a pgrouter EnqueueMany (enqueueSpecs) carry: the same batches on
// both sides, as an application loading many jobs would send them; at
// 1,000 a batch, the commits' own WAL is a few bytes a job.
const enqueueBatch = 1000

// riverInsert inserts n no-op jobs with InsertMany, enqueueBatch a call.
func riverInsert(b testing.TB, client *river.Client[pgx.Tx], n int) {
	params := make([]river.InsertManyParams, 0, enqueueBatch)
	for i := range n {
		params = append(params, river.InsertManyParams{Args: noopArgs{N: i}})
		if len(params) == cap(params) || i == n-1 {
			if _, err := client.InsertMany(context.Background(), params); err != nil {
				b.Fatal(err)
			}
			params = params[:0]
		}
	}
}

// riverDrain starts client, waits for the completion events of its n
// jobs, and returns the time from its start to the last event; the
// caller stops the client (riverStop).
func riverDrain(b testing.TB, client *river.Client[pgx.Tx], n int) time.Duration {
	ctx := context.Background()
	// River drops events a full channel cannot take (its default holds
	// 1,000): room for every job, or a fast run would lose some.
	completed, stop := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n})
	defer stop()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	timeout := time.After(10 * time.Minute)
	for k := 0; k < n; k++ {
		select {
		case <-completed:
		case <-timeout:
			b.Fatalf("River completed %d of %d jobs in 10 minutes", k, n)
		}
	}
	return time.Since(start)
}

// riverStop stops client, waiting up to a minute.
func riverStop(b testing.TB, client *river.Client[pgx.Tx]) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := client.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}

// riverMigrate installs River's schema beside pgrouter's.
func riverMigrate(ctx context.Context, db *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(db), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}
