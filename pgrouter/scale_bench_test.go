package pgrouter_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// Benchmarks of flatness at scale: each measures its baseline in the same
// run, on the same Router (its connections and their prepared statements
// live through every phase, as a long-lived process's do). Heavy: run
// them one at a time with -benchtime 1x, e.g.
//
//	go test -run '^$' -bench 'BenchmarkAfterDrain' -benchtime 1x ./pgrouter/
//
// LEASEROUTER_SCALE_JOBS sets the number of jobs drained or backlogged
// (default 1,000,000); LEASEROUTER_READER_SECONDS the time the long reader
// holds its snapshot (default 10).

// scaleJobs is the number of jobs the scale benchmarks drain or queue.
func scaleJobs() int { return envInt("LEASEROUTER_SCALE_JOBS", 1_000_000) }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// latencies are sorted durations.
type latencies []time.Duration

func (l latencies) q(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(float64(len(l))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// enqueueRange enqueues jobs prefix+i for i in [from, to) in batches of
// 1000.
func enqueueRange(b *testing.B, r *pgrouter.Router[int], prefix string, from, to int) {
	b.Helper()
	specs := make([]leaserouter.JobSpec[int], 0, 1000)
	for i := from; i < to; i++ {
		specs = append(specs, leaserouter.JobSpec[int]{ID: prefix + strconv.Itoa(i), Payload: i})
		if len(specs) == cap(specs) || i == to-1 {
			if _, err := r.EnqueueMany(context.Background(), specs); err != nil {
				b.Fatal(err)
			}
			specs = specs[:0]
		}
	}
}

// claimLatencies enqueues n jobs, then takes them with n single
// TryAcquires (batch 1) or n/batch TryAcquireManys, completing each
// lease (Complete, one round trip each; batches: in a claim loop of
// their own); it returns the claims' latencies and the claim+complete
// latencies (batch 1 only).
func claimLatencies(b *testing.B, r *pgrouter.Router[int], prefix string, n, batch int) (claim, claimComplete latencies) {
	b.Helper()
	ctx := context.Background()
	enqueueRange(b, r, prefix, 0, n)
	for taken := 0; taken < n; {
		start := time.Now()
		ls, err := r.TryAcquireMany(ctx, "w", batch)
		claimed := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		claim = append(claim, claimed)
		for _, l := range ls {
			if err := l.Complete(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if batch == 1 {
			claimComplete = append(claimComplete, time.Since(start))
		}
		taken += len(ls)
	}
	slices.Sort(claim)
	slices.Sort(claimComplete)
	return claim, claimComplete
}

// runThroughput enqueues n jobs and runs them through Run (2 workers,
// the given Batch ceiling), returning jobs/s over the Run.
func runThroughput(b *testing.B, r *pgrouter.Router[int], prefix string, n, batch int) float64 {
	b.Helper()
	enqueueRange(b, r, prefix, 0, n)
	return runAll(b, r, n, batch)
}

// runAll runs n queued jobs through Run (2 workers, the given Batch
// ceiling) and returns jobs/s.
func runAll(b *testing.B, r *pgrouter.Router[int], n, batch int) float64 {
	b.Helper()
	var left atomic.Int64
	left.Store(int64(n))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	err := r.Run(ctx, leaserouter.WorkerOptions{Workers: 2, Batch: batch}, func(context.Context, *pgrouter.Lease[int]) error {
		if left.Add(-1) == 0 {
			cancel()
		}
		return nil
	})
	elapsed := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	return float64(n) / elapsed.Seconds()
}

// tableStats are the jobs table's size (table, indexes and TOAST) and
// its live and dead tuples as the statistics collector counts them.
type tableStats struct {
	bytes      int64
	live, dead int64
	rows       int64 // count(*)
}

func readTableStats(b *testing.B, db *pgxpool.Pool) tableStats {
	b.Helper()
	var s tableStats
	ctx := context.Background()
	_, _ = db.Exec(ctx, "SELECT pg_stat_force_next_flush()")
	if err := db.QueryRow(ctx, `SELECT pg_total_relation_size('leaserouter_jobs'), n_live_tup, n_dead_tup,
		(SELECT count(*) FROM leaserouter_jobs)
		FROM pg_stat_user_tables WHERE relname = 'leaserouter_jobs'`).Scan(&s.bytes, &s.live, &s.dead, &s.rows); err != nil {
		b.Fatal(err)
	}
	return s
}

// awaitVacuum waits up to limit for a vacuum of the jobs table ending
// after since (database clock), and says whether one did and how long it
// waited.
func awaitVacuum(b *testing.B, db *pgxpool.Pool, since time.Time, limit time.Duration) (bool, time.Duration) {
	return awaitStat(b, db, "greatest(last_vacuum, last_autovacuum)", since, limit)
}

// awaitStat waits up to limit for the jobs table's statistic column (an
// instant of pg_stat_user_tables) to be after since, and says whether it
// was and how long it waited.
func awaitStat(b *testing.B, db *pgxpool.Pool, column string, since time.Time, limit time.Duration) (bool, time.Duration) {
	start := time.Now()
	for time.Since(start) < limit {
		var done bool
		if err := db.QueryRow(context.Background(), `SELECT coalesce(`+column+` > $1, false)
			FROM pg_stat_user_tables WHERE relname = 'leaserouter_jobs'`, since).Scan(&done); err != nil {
			b.Fatal(err)
		}
		if done {
			return true, time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false, time.Since(start)
}

// phase is one measurement of BenchmarkAfterDrain.
type phase struct {
	claim, claimComplete latencies
	run1, runMany        float64 // jobs/s at Batch 1 and at the default ceiling
}

const (
	latencySamples = 3000  // single claims per latency measurement
	runJobs        = 10000 // jobs per Run throughput measurement (Batch 1)
	runManyJobs    = 50000 // jobs per Run throughput measurement (default Batch)
)

func measurePhase(b *testing.B, r *pgrouter.Router[int], name string) phase {
	b.Helper()
	var p phase
	p.claim, p.claimComplete = claimLatencies(b, r, name+"-lat-", latencySamples, 1)
	p.run1 = runThroughput(b, r, name+"-run1-", runJobs, 1)
	p.runMany = runThroughput(b, r, name+"-runmany-", runManyJobs, 0)
	b.Logf("%s: TryAcquire p50 %.3f ms p99 %.3f ms; +Complete p50 %.3f ms p99 %.3f ms; Run Batch 1 %.0f jobs/s, default Batch %.0f jobs/s",
		name, ms(p.claim.q(.5)), ms(p.claim.q(.99)), ms(p.claimComplete.q(.5)), ms(p.claimComplete.q(.99)), p.run1, p.runMany)
	return p
}

// scaleRetentions are the Retentions the scale benchmarks run at: jobs
// dropped at once, and kept for the default Retention.
var scaleRetentions = []struct {
	name      string
	retention time.Duration
}{{"retention=-1", -1}, {"retention=default", 0}}

// BenchmarkAfterDrain measures single claims (TryAcquire, and TryAcquire
// + Complete: p50, p99 over latencySamples) and Run throughput (2
// workers, Batch 1 and the default ceiling) on an empty table, then
// enqueues and drains scaleJobs() jobs (EnqueueMany of 1000, Run at the
// default Batch), waits for the maintenance loop to purge them when
// Retention < 0, and measures the same again on the same Router. It
// reports both, their ratios (after/empty: latency ratios above 1 and
// throughput ratios below 1 are slowdowns), and the table's size and
// dead tuples after the drain; then, once a vacuum of the table has ended
// after the drain (waiting up to 90s), measures again ("vacuumed").
func BenchmarkAfterDrain(b *testing.B) {
	for _, c := range scaleRetentions {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				afterDrain(b, c.retention)
			}
		})
	}
}

func afterDrain(b *testing.B, retention time.Duration) {
	ctx := context.Background()
	db := pgtest.New(b)
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{Retention: retention})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	empty := measurePhase(b, r, "empty")

	n := scaleJobs()
	start := time.Now()
	enqueueRange(b, r, "drain-", 0, n)
	enqueued := time.Since(start)
	rate := runAll(b, r, n, 0)
	var drained time.Time
	if err := db.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&drained); err != nil {
		b.Fatal(err)
	}
	b.Logf("drain: %d jobs enqueued in %v, run at %.0f jobs/s", n, enqueued.Round(time.Millisecond), rate)
	if retention < 0 {
		purgeStart := time.Now()
		for readTableStats(b, db).rows > 0 {
			if time.Since(purgeStart) > 5*time.Minute {
				b.Fatal("rows not purged within 5 minutes")
			}
			time.Sleep(100 * time.Millisecond)
		}
		b.Logf("drain: purged in %v", time.Since(purgeStart).Round(time.Millisecond))
	}
	s := readTableStats(b, db)
	b.Logf("after drain: %.1f MB (table, indexes, TOAST), %d rows, n_live_tup %d, n_dead_tup %d",
		float64(s.bytes)/1e6, s.rows, s.live, s.dead)
	after := measurePhase(b, r, "after")
	s2 := readTableStats(b, db)
	// Then again once a vacuum (the Router's or autovacuum's) has ended
	// after the drain, if one does within 90s.
	vacuumed, waited := awaitVacuum(b, db, drained, 90*time.Second)
	var settled phase
	if vacuumed {
		settled = measurePhase(b, r, "vacuumed")
		b.ReportMetric(ms(settled.claim.q(.5)), "vacuumed-claim-p50-ms")
		b.ReportMetric(ms(settled.claim.q(.99)), "vacuumed-claim-p99-ms")
		b.ReportMetric(settled.run1/empty.run1, "vacuumed-run-batch1-ratio")
		b.ReportMetric(settled.runMany/empty.runMany, "vacuumed-run-ratio")
	}
	b.ReportMetric(waited.Seconds(), "vacuum-wait-s")

	b.ReportMetric(ms(empty.claim.q(.5)), "empty-claim-p50-ms")
	b.ReportMetric(ms(empty.claim.q(.99)), "empty-claim-p99-ms")
	b.ReportMetric(ms(after.claim.q(.5)), "after-claim-p50-ms")
	b.ReportMetric(ms(after.claim.q(.99)), "after-claim-p99-ms")
	b.ReportMetric(ms(after.claim.q(.99))/ms(empty.claim.q(.99)), "claim-p99-ratio")
	b.ReportMetric(ms(empty.claimComplete.q(.99)), "empty-claim+complete-p99-ms")
	b.ReportMetric(ms(after.claimComplete.q(.99)), "after-claim+complete-p99-ms")
	b.ReportMetric(ms(after.claimComplete.q(.99))/ms(empty.claimComplete.q(.99)), "claim+complete-p99-ratio")
	b.ReportMetric(empty.run1, "empty-run-batch1-jobs/s")
	b.ReportMetric(after.run1, "after-run-batch1-jobs/s")
	b.ReportMetric(after.run1/empty.run1, "run-batch1-ratio")
	b.ReportMetric(empty.runMany, "empty-run-jobs/s")
	b.ReportMetric(after.runMany, "after-run-jobs/s")
	b.ReportMetric(after.runMany/empty.runMany, "run-ratio")
	b.ReportMetric(float64(s.bytes)/1e6, "drained-MB")
	b.ReportMetric(float64(s.dead), "drained-dead-tuples")
	b.ReportMetric(float64(s2.dead), "end-dead-tuples")
}

// BenchmarkBacklogClaim measures claims (TryAcquire of one job, and
// TryAcquireMany of 32: p50, p99) against a queue of a few thousand
// pending jobs, then against one of scaleJobs() pending jobs (enqueued
// on top of the latency samples), on the same Router; it reports both.
func BenchmarkBacklogClaim(b *testing.B) {
	for b.Loop() {
		ctx := context.Background()
		db := pgtest.New(b)
		r, err := pgrouter.New[int](ctx, db, pgrouter.Options{Retention: -1})
		if err != nil {
			b.Fatal(err)
		}
		small1, _ := claimLatencies(b, r, "small1-", latencySamples, 1)
		small32, _ := claimLatencies(b, r, "small32-", 32*latencySamples/10, 32)
		// The backlog is enqueued after the samples' jobs would be: claims
		// in ready order take the samples first, in front of it.
		var grown time.Time
		enqueueRange(b, r, "backlog-", 0, scaleJobs())
		if err := db.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&grown); err != nil {
			b.Fatal(err)
		}
		// The statistics catch up with the growth when the table is
		// analyzed (the Router's ANALYZE or autoanalyze): wait up to 30s.
		analyzed, waited := awaitStat(b, db, "greatest(last_analyze, last_autoanalyze)", grown, 30*time.Second)
		b.Logf("backlog: analyzed after it grew: %v (waited %v)", analyzed, waited.Round(time.Millisecond))
		b.ReportMetric(waited.Seconds(), "analyze-wait-s")
		big1, big32 := backlogClaims(b, r)
		b.Logf("backlog %d: TryAcquire p50 %.3f p99 %.3f ms (small queue p50 %.3f p99 %.3f); TryAcquireMany(32) p50 %.3f p99 %.3f ms (small %.3f / %.3f)",
			scaleJobs(), ms(big1.q(.5)), ms(big1.q(.99)), ms(small1.q(.5)), ms(small1.q(.99)),
			ms(big32.q(.5)), ms(big32.q(.99)), ms(small32.q(.5)), ms(small32.q(.99)))
		b.ReportMetric(ms(small1.q(.99)), "small-claim1-p99-ms")
		b.ReportMetric(ms(big1.q(.5)), "backlog-claim1-p50-ms")
		b.ReportMetric(ms(big1.q(.99)), "backlog-claim1-p99-ms")
		b.ReportMetric(ms(small32.q(.99)), "small-claim32-p99-ms")
		b.ReportMetric(ms(big32.q(.5)), "backlog-claim32-p50-ms")
		b.ReportMetric(ms(big32.q(.99)), "backlog-claim32-p99-ms")
		r.Close(ctx)
	}
}

// backlogClaims claims from the backlog: latencySamples single claims,
// then latencySamples/10 claims of 32, each lease completed.
func backlogClaims(b *testing.B, r *pgrouter.Router[int]) (one, many latencies) {
	ctx := context.Background()
	take := func(n int) time.Duration {
		start := time.Now()
		ls, err := r.TryAcquireMany(ctx, "w", n)
		took := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range ls {
			if err := l.Complete(ctx); err != nil {
				b.Fatal(err)
			}
		}
		return took
	}
	for range latencySamples {
		one = append(one, take(1))
	}
	for range latencySamples / 10 {
		many = append(many, take(32))
	}
	slices.Sort(one)
	slices.Sort(many)
	return one, many
}
