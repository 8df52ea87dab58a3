package benchmarks

// WAL per job: what the server writes to its write-ahead log for a job's
// whole life, enqueue and drain, on pgrouter and on River, in the same
// run on the same throwaway cluster:
//
//	cd benchmarks && go test -run '^$' -bench '^BenchmarkWAL$' -benchtime 30000x -count 3 -timeout 60m -v
//
// Each side gets a fresh database on the cluster, then: a CHECKPOINT;
// pg_current_wal_lsn(); b.N no-op jobs enqueued as each side's users
// would load many (River's InsertMany, pgrouter's EnqueueMany, enqueueBatch
// jobs a call); pg_current_wal_lsn(); the drain (River's client started,
// pgrouter's Run with its defaults) until every job is completed;
// pg_current_wal_lsn() (at Retention -1 after every finished row is
// purged: deleting it is part of such a job's life). The sides: River (one queue, fetch cooldown and
// poll interval at their 1 ms minimum) at MaxWorkers 100 and 1000, then
// pgrouter at the default Retention and at Retention -1. Each reports:
//
//   - WAL-B/job: bytes of WAL from the first position to the last, per
//     job (enqueue + drain); enqueue-WAL-B/job and drain-WAL-B/job split it;
//   - FPI-B/job: the part of it that is full-page images (from
//     pg_walinspect);
//   - jobs/s: the drain's rate (River: from its start to the last
//     completion event; pgrouter: from the start of Run to its return);
//   - pgrouter only, xRiver100-WAL and xRiver1000-WAL: its WAL-B/job over
//     River's measured earlier in the same run, at MaxWorkers 100 (the
//     reference: River's documented setting) and 1000; with -count above
//     1, over the least of River's runs (riverLeast).
//
// With -v, the benchmark's log (after each result line; without -v it is
// cut to a few lines) gives the breakdown of each side's WAL by
// pg_walinspect's resource manager and record type (pg_get_wal_stats, per_record): records and bytes per job
// in the enqueue and in the drain, full-page image bytes apart, and the
// bytes no record accounts for (WAL page headers, alignment). Everything
// the cluster writes in the window counts, including each side's own
// maintenance and autovacuum: the cluster runs nothing else. WAL bytes
// are nearly the same from run to run; jobs/s is noisy on a busy machine.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// walRiverWorkers are River's MaxWorkers in the WAL comparison: its
// documented 100 (the reference) and 1000.
var walRiverWorkers = []int{100, 1000}

// riverLeast is the reference River figure after a River run of got
// WAL-B/job, given the reference so far (0 before the first run): the
// least of River's runs. A run whose window catches a flush of River's
// GIN pending lists writes about 9% more than one that does not (224 B a
// job of 30,000 in one run), so the least is the conservative reference,
// and every side's ratio is to the same figure whichever River run came
// last.
func riverLeast(sofar, got float64) float64 {
	if sofar == 0 {
		return got
	}
	return min(sofar, got)
}

// BenchmarkWAL: WAL per job, enqueue + drain, River at each of
// walRiverWorkers, then pgrouter at each of pgrouterRetentions, each
// pgrouter side also as a ratio to each River side of the same run.
func BenchmarkWAL(b *testing.B) {
	river := map[int]float64{} // River's WAL-B/job in this run, by MaxWorkers
	for _, w := range walRiverWorkers {
		b.Run(fmt.Sprint("river/MaxWorkers=", w), func(b *testing.B) {
			f := riverWAL(b, b.N, w)
			f.report(b)
			river[w] = riverLeast(river[w], f.perJob())
		})
	}
	for _, retention := range pgrouterRetentions {
		b.Run("pgrouter/"+retention.name, func(b *testing.B) {
			f := pgrouterWAL(b, b.N, retention.d)
			f.report(b)
			for _, w := range walRiverWorkers {
				if river[w] > 0 {
					b.ReportMetric(f.perJob()/river[w], fmt.Sprintf("xRiver%d-WAL", w))
				}
			}
		})
	}
}

// TestWALWorkloads runs each side of BenchmarkWAL on a few jobs, so the
// suite checks the harness: every job completed, WAL measured in both
// phases, and pg_walinspect's records accounting for nearly all of it.
func TestWALWorkloads(t *testing.T) {
	const n = 300
	sides := map[string]func(testing.TB) walFigures{
		"pgrouter/Retention=default": func(tb testing.TB) walFigures { return pgrouterWAL(tb, n, 0) },
		"pgrouter/Retention=-1":      func(tb testing.TB) walFigures { return pgrouterWAL(tb, n, -1) },
		"river/MaxWorkers=100":       func(tb testing.TB) walFigures { return riverWAL(tb, n, 100) },
	}
	for name, side := range sides {
		t.Run(name, func(t *testing.T) {
			f := side(t)
			require.Positive(t, f.enqueue, "the enqueue wrote WAL")
			require.Positive(t, f.drain, "the drain wrote WAL")
			require.Positive(t, f.elapsed)
			var recorded int64
			for _, r := range f.records {
				recorded += r.enqueue.bytes + r.enqueue.fpi + r.drain.bytes + r.drain.fpi
			}
			total := f.enqueue + f.drain
			require.LessOrEqual(t, recorded, total, "records fit in the window")
			require.Greater(t, recorded, total*9/10, "records account for most of the window")
			t.Log(f.breakdown(name))
		})
	}
}

// walFigures are one side's measurement: WAL bytes of each phase, the
// drain's duration, and pg_walinspect's records of each phase.
type walFigures struct {
	n              int
	enqueue, drain int64 // bytes between the positions
	elapsed        time.Duration
	records        []walRecordType
}

// walRecordType is one resource manager/record type's share of a window.
type walRecordType struct {
	name           string
	enqueue, drain walCount
}

// walCount is a record type's records and bytes in one phase; fpi is the
// bytes of its full-page images, apart from bytes.
type walCount struct{ count, bytes, fpi int64 }

func (f walFigures) perJob() float64 { return float64(f.enqueue+f.drain) / float64(f.n) }

// report reports f's metrics on b, and logs its breakdown when b is the
// run whose figures are kept (not the single job of the first run).
func (f walFigures) report(b *testing.B) {
	n := float64(f.n)
	var fpi int64
	for _, r := range f.records {
		fpi += r.enqueue.fpi + r.drain.fpi
	}
	b.ReportMetric(f.perJob(), "WAL-B/job")
	b.ReportMetric(float64(f.enqueue)/n, "enqueue-WAL-B/job")
	b.ReportMetric(float64(f.drain)/n, "drain-WAL-B/job")
	b.ReportMetric(float64(fpi)/n, "FPI-B/job")
	b.ReportMetric(n/f.elapsed.Seconds(), "jobs/s")
	if f.n > 1 {
		b.Log(f.breakdown(b.Name()))
	}
}

// breakdown is f's records as a table: per job, by record type, the
// records and bytes of the enqueue and of the drain, the full-page image
// bytes of both, and the total; largest first, then what no record
// accounts for.
func (f walFigures) breakdown(name string) string {
	var sb strings.Builder
	n := float64(f.n)
	fmt.Fprintf(&sb, "WAL of %s, per job (%d jobs): %.0f B (enqueue %.0f, drain %.0f)\n",
		name, f.n, float64(f.enqueue+f.drain)/n, float64(f.enqueue)/n, float64(f.drain)/n)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "resource_manager/record_type\tenqueue recs\tenqueue B\tdrain recs\tdrain B\tFPI B\ttotal B\t")
	var recorded int64
	for _, r := range f.records {
		total := r.enqueue.bytes + r.enqueue.fpi + r.drain.bytes + r.drain.fpi
		recorded += total
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%.3f\t%.1f\t%.1f\t%.1f\t\n", r.name,
			float64(r.enqueue.count)/n, float64(r.enqueue.bytes)/n,
			float64(r.drain.count)/n, float64(r.drain.bytes)/n,
			float64(r.enqueue.fpi+r.drain.fpi)/n, float64(total)/n)
	}
	fmt.Fprintf(tw, "(page headers, alignment)\t\t\t\t\t\t%.1f\t\n", float64(f.enqueue+f.drain-recorded)/n)
	_ = tw.Flush()
	return sb.String()
}

// walWindow takes the WAL positions of a side's run on db's cluster.
type walWindow struct {
	tb  testing.TB
	db  *pgxpool.Pool
	lsn []string // the positions taken, in order
}

// startWAL installs pg_walinspect in db's database, checkpoints the
// cluster (so the window's full-page images are those any run after a
// checkpoint writes), and takes the first position.
func startWAL(tb testing.TB, db *pgxpool.Pool) *walWindow {
	tb.Helper()
	ctx := context.Background()
	for _, q := range []string{"CREATE EXTENSION IF NOT EXISTS pg_walinspect", "CHECKPOINT"} {
		if _, err := db.Exec(ctx, q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
	w := &walWindow{tb: tb, db: db}
	w.mark()
	return w
}

// mark takes the next position.
func (w *walWindow) mark() {
	w.tb.Helper()
	var lsn string
	if err := w.db.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		w.tb.Fatal(err)
	}
	w.lsn = append(w.lsn, lsn)
}

// figures returns the run's figures from its three positions (start,
// after the enqueue, after the drain) for n jobs and the drain's elapsed
// time.
func (w *walWindow) figures(n int, elapsed time.Duration) walFigures {
	w.tb.Helper()
	if len(w.lsn) != 3 {
		w.tb.Fatalf("%d WAL positions taken, want 3", len(w.lsn))
	}
	f := walFigures{n: n, elapsed: elapsed}
	f.enqueue, f.drain = w.diff(w.lsn[0], w.lsn[1]), w.diff(w.lsn[1], w.lsn[2])
	byName := map[string]*walRecordType{}
	for phase, get := range []func(*walRecordType) *walCount{
		func(r *walRecordType) *walCount { return &r.enqueue },
		func(r *walRecordType) *walCount { return &r.drain },
	} {
		for _, rc := range w.records(w.lsn[phase], w.lsn[phase+1]) {
			r := byName[rc.name]
			if r == nil {
				r = &walRecordType{name: rc.name}
				byName[rc.name] = r
			}
			*get(r) = rc.walCount
		}
	}
	for _, r := range byName {
		f.records = append(f.records, *r)
	}
	total := func(r walRecordType) int64 { return r.enqueue.bytes + r.enqueue.fpi + r.drain.bytes + r.drain.fpi }
	slices.SortFunc(f.records, func(a, b walRecordType) int {
		if d := total(b) - total(a); d != 0 {
			return int(d)
		}
		return strings.Compare(a.name, b.name)
	})
	return f
}

// diff is the number of WAL bytes from a to b.
func (w *walWindow) diff(a, b string) int64 {
	w.tb.Helper()
	var d int64
	if err := w.db.QueryRow(context.Background(), "SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint", a, b).Scan(&d); err != nil {
		w.tb.Fatal(err)
	}
	return d
}

// records is pg_walinspect's count of the records from a to b, by
// resource manager and record type. pg_current_wal_lsn is where WAL is
// written up to; pg_walinspect reads only what is flushed, which lags
// behind after a transaction committed without waiting for its flush
// (synchronous_commit off: pgrouter sends some so) until the WAL writer's
// next round, a fraction of a second: records waits for it, up to a
// minute.
func (w *walWindow) records(a, b string) []struct {
	name string
	walCount
} {
	w.tb.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		var flushed bool
		if err := w.db.QueryRow(context.Background(), "SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn", b).Scan(&flushed); err != nil {
			w.tb.Fatal(err)
		}
		if flushed {
			break
		}
		if time.Now().After(deadline) {
			w.tb.Fatalf("WAL not flushed up to %s a minute after it was written", b)
		}
		time.Sleep(10 * time.Millisecond) // the WAL writer's next round (wal_writer_delay, 200 ms)
	}
	rows, err := w.db.Query(context.Background(), `
		SELECT "resource_manager/record_type", count, record_size, fpi_size
		FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn, true)
		WHERE count > 0`, a, b)
	if err != nil {
		w.tb.Fatal(err)
	}
	defer rows.Close()
	var out []struct {
		name string
		walCount
	}
	for rows.Next() {
		var r struct {
			name string
			walCount
		}
		if err := rows.Scan(&r.name, &r.count, &r.bytes, &r.fpi); err != nil {
			w.tb.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		w.tb.Fatal(err)
	}
	return out
}

// pgrouterWAL measures pgrouter's WAL for n jobs: EnqueueMany in batches
// of enqueueBatch, then Run with its defaults (2 workers) and the given
// Retention until every job is finished; at a Retention < 0, the drain's
// window also waits for the purge of every finished job (Run's rate
// does not).
func pgrouterWAL(tb testing.TB, n int, retention time.Duration) walFigures {
	db := pgtest.New(tb)
	ctx := context.Background()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{Retention: retention})
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close(ctx)
	resetTimer(tb)
	w := startWAL(tb, db)
	if err := enqueueSpecs(ctx, r, n); err != nil {
		tb.Fatal(err)
	}
	w.mark()
	elapsed := pgrouterDrain(tb, r, n)
	if retention < 0 {
		waitPurged(tb, db)
	}
	w.mark()
	return w.figures(n, elapsed)
}

// waitPurged waits, up to a minute, until the Router's maintenance has
// deleted every finished job (Retention < 0): a job's deletion is part
// of its life there, and the last batches finish after the last purge
// of the drain.
func waitPurged(tb testing.TB, db *pgxpool.Pool) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var left int64
		if err := db.QueryRow(context.Background(), "SELECT count(*) FROM leaserouter_jobs").Scan(&left); err != nil {
			tb.Fatal(err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d finished jobs not purged a minute after the drain", left)
		}
		time.Sleep(10 * time.Millisecond) // the maintenance loop's next round (PollInterval, 1 s)
	}
}

// riverWAL measures River's WAL for n jobs: InsertMany in batches of
// enqueueBatch, then the client (one queue of maxWorkers, 1 ms fetches)
// until every job's completion event.
func riverWAL(tb testing.TB, n, maxWorkers int) walFigures {
	db := pgtest.New(tb)
	client := newRiver(tb, db, maxWorkers)
	resetTimer(tb)
	w := startWAL(tb, db)
	riverInsert(tb, client, n)
	w.mark()
	elapsed := riverDrain(tb, client, n)
	w.mark()
	riverStop(tb, client)
	return w.figures(n, elapsed)
}

// TestRiverLeastIsTheLeastRun: the reference is the first River run's
// figure, then the least of the runs so far, whatever their order.
func TestRiverLeastIsTheLeastRun(t *testing.T) {
	ref := 0.0
	for _, got := range []float64{2937, 2698, 2705} {
		ref = riverLeast(ref, got)
	}
	require.Equal(t, 2698.0, ref)
	require.Equal(t, 2705.0, riverLeast(0, 2705))
}
