package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// BenchmarkLongReader: a steady load of about 1,000 jobs/s (EnqueueMany
// of 10 every 10ms; readerClaimers goroutines: TryAcquire, then
// Complete) runs for a
// baseline of 5s; then a connection holds a REPEATABLE READ snapshot
// (BEGIN; SELECT 1 FROM leaserouter_jobs LIMIT 1) for
// LEASEROUTER_READER_SECONDS (default 10); then the load goes on for up
// to 60s more. It reports the claims' (TryAcquire that leased a job) p99
// before, during and after the reader, and the time from the reader's end
// to the first 1s window whose p99 is within 1.5x the baseline's (recovery;
// -1 if none).
func BenchmarkLongReader(b *testing.B) {
	for _, c := range scaleRetentions {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				res := longReader(b, c.retention, 5*time.Second,
					time.Duration(envInt("LEASEROUTER_READER_SECONDS", 10))*time.Second, 60*time.Second)
				b.Logf("%+v", res)
				res.report(b)
				b.ReportMetric(res.rate, "jobs/s")
			}
		})
	}
}

// readerResult is what longReader measured.
type readerResult struct {
	before, during, duringMax time.Duration // claim p99 before and during the reader; the worst during it
	duringLast                time.Duration // claim p99 in the reader's last second
	afterFirst, after         time.Duration // claim p99 in the first second after it, and over the rest of the run
	recovery                  time.Duration // reader end to the first window within 1.5x before; -1 if none
	rate                      float64       // jobs completed per second over the whole run
	windows                   []time.Duration
}

// report reports res's claim p99s (ms) and recovery (s) on b.
func (res readerResult) report(b *testing.B) {
	b.ReportMetric(ms(res.before), "before-p99-ms")
	b.ReportMetric(ms(res.during), "during-p99-ms")
	b.ReportMetric(ms(res.duringMax), "during-max-ms")
	b.ReportMetric(ms(res.duringLast), "during-last-s-p99-ms")
	b.ReportMetric(ms(res.afterFirst), "after-1st-s-p99-ms")
	b.ReportMetric(ms(res.after), "after-p99-ms")
	b.ReportMetric(res.recovery.Seconds(), "recovery-s")
}

// longReader runs the long-reader scenario (see BenchmarkLongReader) with
// the given phases on a Router; after ends early once recovered and 5s
// more passed.
func longReader(tb testing.TB, retention, before, hold, after time.Duration) readerResult {
	db := pgtest.New(tb)
	r, err := pgrouter.New[int](context.Background(), db, pgrouter.Options{Retention: retention})
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close(context.Background())
	enqueue := func(ctx context.Context, i int) error {
		specs := make([]leaserouter.JobSpec[int], 10)
		for k := range specs {
			specs[k] = leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i, "-", k), Payload: k}
		}
		_, err := r.EnqueueMany(ctx, specs)
		return err
	}
	claim := func(ctx context.Context) (func(context.Context) error, error) {
		l, err := r.TryAcquire(ctx, "w")
		if err != nil {
			return nil, err
		}
		return l.Complete, nil
	}
	return readerLoad(tb, db, "leaserouter_jobs", enqueue, claim, before, hold, after)
}

// readerClaimers is how many goroutines claim in the long-reader
// scenario: enough to keep up with 1,000 jobs/s on a busy machine.
const readerClaimers = 4

// readerLoad runs the long-reader scenario on any queue: enqueue(ctx, i)
// adds 10 jobs (called every 10ms), claim takes one (ErrNoJob if none)
// and returns its completion; the reader's snapshot reads table.
func readerLoad(tb testing.TB, db *pgxpool.Pool, table string, enqueue func(context.Context, int) error,
	claim func(context.Context) (func(context.Context) error, error), before, hold, after time.Duration) readerResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type sample struct {
		at  time.Time
		dur time.Duration
	}
	var (
		mu      sync.Mutex
		samples []sample
		done    atomic.Int64
		errs    = make(chan error, 1+readerClaimers)
		wg      sync.WaitGroup
	)
	wg.Add(1 + readerClaimers)
	go func() { // producer: 10 jobs every 10ms
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := enqueue(ctx, i); err != nil && ctx.Err() == nil {
				errs <- err
				return
			}
		}
	}()
	for range readerClaimers {
		go func() { // claimer
			defer wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				complete, err := claim(ctx)
				took := time.Since(start)
				if errors.Is(err, leaserouter.ErrNoJob) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				mu.Lock()
				samples = append(samples, sample{start, took})
				mu.Unlock()
				if err := complete(ctx); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	fail := func(err error) {
		cancel()
		wg.Wait()
		tb.Fatal(err)
	}
	wait := func(d time.Duration) {
		select {
		case err := <-errs:
			fail(err)
		case <-time.After(d):
		}
	}
	t0 := time.Now()
	wait(before)
	reader, err := db.Begin(ctx)
	if err != nil {
		fail(err)
	}
	if _, err := reader.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		fail(err)
	}
	if _, err := reader.Exec(ctx, "SELECT 1 FROM "+table+" LIMIT 1"); err != nil {
		fail(err)
	}
	readerStart := time.Now()
	wait(hold)
	_ = reader.Rollback(ctx)
	readerEnd := time.Now()

	// after: 1s windows until one is within 1.5x of before's p99, then 5s
	// more (or after ends).
	p99Of := func(from, to time.Time) (latencies, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		var l latencies
		for _, s := range samples {
			if !s.at.Before(from) && s.at.Before(to) {
				l = append(l, s.dur)
			}
		}
		slices.Sort(l)
		return l, l.q(.99)
	}
	_, base := p99Of(t0.Add(time.Second), readerStart) // the first second warms up
	res := readerResult{before: base, recovery: -1}
	var recoveredAt time.Time
	for w := readerEnd; w.Before(readerEnd.Add(after)); w = w.Add(time.Second) {
		wait(time.Until(w.Add(time.Second)))
		_, p := p99Of(w, w.Add(time.Second))
		res.windows = append(res.windows, p)
		if recoveredAt.IsZero() && p <= base*3/2 {
			recoveredAt = w.Add(time.Second)
			res.recovery = recoveredAt.Sub(readerEnd)
		}
		if !recoveredAt.IsZero() && time.Since(recoveredAt) >= 5*time.Second {
			break
		}
	}
	end := time.Now()
	cancel()
	wg.Wait()
	select {
	case err := <-errs:
		tb.Fatal(err)
	default:
	}
	during, p := p99Of(readerStart, readerEnd)
	res.during = p
	if len(during) > 0 {
		res.duringMax = during[len(during)-1]
	}
	_, res.duringLast = p99Of(readerEnd.Add(-time.Second), readerEnd)
	_, res.afterFirst = p99Of(readerEnd, readerEnd.Add(time.Second))
	_, res.after = p99Of(readerEnd, end)
	res.rate = float64(done.Load()) / end.Sub(t0).Seconds()
	return res
}

// BenchmarkLongReaderFloor is BenchmarkLongReader's scenario on the
// least queue table that keeps the contract's ready order: a bigserial
// key, a state, a ready time and a payload, a partial index on the ready
// order of pending rows; a claim is one statement (the first pending row
// in ready order, FOR UPDATE SKIP LOCKED, made leased), a completion
// another (the row deleted), no settling, no tokens. What it measures
// during the reader is PostgreSQL's cost of stepping over the dead index
// entries a held snapshot keeps (every claim visits each of them): the
// floor under pgrouter's claims in that scenario.
func BenchmarkLongReaderFloor(b *testing.B) {
	for b.Loop() {
		db := pgtest.New(b)
		ctx := context.Background()
		if _, err := db.Exec(ctx, `CREATE TABLE floor_jobs (
				id bigserial PRIMARY KEY, state smallint NOT NULL DEFAULT 0,
				ready_at timestamptz NOT NULL DEFAULT clock_timestamp(), payload jsonb NOT NULL);
			CREATE INDEX floor_jobs_ready ON floor_jobs (ready_at, id) WHERE state = 0`); err != nil {
			b.Fatal(err)
		}
		enqueue := func(ctx context.Context, i int) error {
			_, err := db.Exec(ctx, "INSERT INTO floor_jobs (payload) SELECT to_jsonb(g) FROM generate_series(1, 10) g")
			return err
		}
		claim := func(ctx context.Context) (func(context.Context) error, error) {
			var id int64
			err := db.QueryRow(ctx, `UPDATE floor_jobs SET state = 1 WHERE id = (SELECT id FROM floor_jobs
				WHERE state = 0 ORDER BY ready_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id`).Scan(&id)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, leaserouter.ErrNoJob
			}
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				_, err := db.Exec(ctx, "DELETE FROM floor_jobs WHERE id = $1", id)
				return err
			}, nil
		}
		res := readerLoad(b, db, "floor_jobs", enqueue, claim, 5*time.Second,
			time.Duration(envInt("LEASEROUTER_READER_SECONDS", 10))*time.Second, 60*time.Second)
		b.Logf("%+v", res)
		res.report(b)
	}
}
