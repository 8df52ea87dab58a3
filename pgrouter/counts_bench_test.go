package pgrouter_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// BenchmarkStatsAt10M measures Stats, Queues and List's first page (no
// filter; State failed) at 10M rows (LEASEROUTER_SCALE_ROWS), p50/p99 of
// 50 calls each, and ExactStats and ExactQueues once: first with the
// table analyzed but not vacuumed (the visibility map empty: every index
// entry walked costs a read of its row), then after a VACUUM. The rows
// are written directly (INSERT ... SELECT generate_series, the indexes
// built after), in one queue "big" (by i % 100: 60% succeeded, 20%
// pending, 10% scheduled, 5% dead, 4% canceled, 1% leased) and 5,000 in
// a queue "small" (exact counts). With JIT on, a capped count's cost
// estimate passed jit_above_cost and compiling its plan took ~300 ms, a
// hundred times the count (hence jit_off.sql). Heavy (minutes, ~4 GB of
// disk at 10M):
//
//	LEASEROUTER_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkStatsAt10M -benchtime 1x -timeout 60m ./pgrouter/
func BenchmarkStatsAt10M(b *testing.B) {
	ctx := context.Background()
	n := envInt("LEASEROUTER_SCALE_ROWS", 10_000_000)
	db := pgtest.New(b)
	start := time.Now()
	fillJobs(b, db, n)
	b.Logf("%d rows written and indexed in %v", n+5000, time.Since(start).Round(time.Second))
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{Queue: "big", NoVacuum: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = r.Close(ctx) }()
	for b.Loop() {
		execSQL(b, db, "ANALYZE leaserouter_jobs")
		measureCounts(b, r, "analyzed")
		start = time.Now()
		execSQL(b, db, "VACUUM (ANALYZE) leaserouter_jobs")
		b.Logf("VACUUM (ANALYZE) in %v", time.Since(start).Round(time.Millisecond))
		measureCounts(b, r, "vacuumed")
	}
}

func execSQL(b testing.TB, db *pgxpool.Pool, sql string) {
	b.Helper()
	if _, err := db.Exec(context.Background(), sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		b.Fatal(err)
	}
}

// fillJobs writes n jobs into queue "big" and 5,000 into "small", with
// the indexes dropped and built again after.
func fillJobs(b testing.TB, db *pgxpool.Pool, n int) {
	ctx := context.Background()
	rows, err := db.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'leaserouter_jobs'`)
	if err != nil {
		b.Fatal(err)
	}
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			b.Fatal(err)
		}
		defs[name] = def
	}
	if rows.Err() != nil {
		b.Fatal(rows.Err())
	}
	execSQL(b, db, "ALTER TABLE leaserouter_jobs DROP CONSTRAINT leaserouter_jobs_pkey")
	for name := range defs {
		if name != "leaserouter_jobs_pkey" {
			execSQL(b, db, "DROP INDEX "+name)
		}
	}
	insert := func(queue string, from, to int) {
		execSQL(b, db, fmt.Sprintf(`INSERT INTO leaserouter_jobs (queue, id, seq, state, ready_at, max_attempts,
			payload, created_at, updated_at, purge_at, lease_expires_at, owner, attempt, token)
		SELECT '%[1]s', 'j' || i, i, st, CASE WHEN st = 'scheduled' THEN now() + interval '1 day' ELSE now() END, 3, to_jsonb(i), now(), now(),
			CASE WHEN st >= 'succeeded' THEN now() + interval '1 day' END,
			CASE WHEN st = 'leased' THEN now() + interval '1 hour' END,
			CASE WHEN st = 'leased' THEN 'w' ELSE '' END,
			CASE WHEN st = 'pending' THEN 0 ELSE 1 END, CASE WHEN st = 'pending' THEN 0 ELSE i END
		FROM generate_series(%[2]d, %[3]d) AS i,
			LATERAL (SELECT (CASE WHEN i %% 100 < 60 THEN 'succeeded' WHEN i %% 100 < 80 THEN 'pending'
				WHEN i %% 100 < 90 THEN 'scheduled' WHEN i %% 100 < 95 THEN 'failed'
				WHEN i %% 100 < 99 THEN 'canceled' ELSE 'leased' END)::leaserouter_job_state AS st) s`,
			queue, from, to-1))
	}
	const chunk = 1_000_000
	for from := 0; from < n; from += chunk {
		insert("big", from, min(n, from+chunk))
	}
	insert("small", n, n+5000)
	execSQL(b, db, fmt.Sprintf("SELECT setval('leaserouter_job_seq', %d)", n+5000))
	execSQL(b, db, "SET maintenance_work_mem = '512MB'")
	execSQL(b, db, defs["leaserouter_jobs_pkey"])
	execSQL(b, db, "ALTER TABLE leaserouter_jobs ADD CONSTRAINT leaserouter_jobs_pkey PRIMARY KEY USING INDEX leaserouter_jobs_pkey")
	for name, def := range defs {
		if name != "leaserouter_jobs_pkey" {
			execSQL(b, db, def)
		}
	}
}

// measureCounts logs p50/p99 of 50 calls of Stats, Queues and List's
// first pages, and one ExactStats and ExactQueues, with their figures.
func measureCounts(b *testing.B, r *pgrouter.Router[int], phase string) {
	ctx := context.Background()
	timed := func(what string, f func() error) {
		var l latencies
		for range 50 {
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			l = append(l, time.Since(start))
		}
		slices.Sort(l)
		b.Logf("%s: %s p50 %.2fms p99 %.2fms", phase, what, ms(l.q(0.5)), ms(l.q(0.99)))
		b.ReportMetric(ms(l.q(0.5)), phase+"-"+what+"-p50-ms")
		b.ReportMetric(ms(l.q(0.99)), phase+"-"+what+"-p99-ms")
	}
	timed("Stats", func() error { _, err := r.Stats(ctx); return err })
	timed("Queues", func() error { _, err := r.Queues(ctx); return err })
	timed("List", func() error { _, err := r.List(ctx, leaserouter.ListParams{}); return err })
	timed("ListDead", func() error {
		_, err := r.List(ctx, leaserouter.ListParams{States: []leaserouter.State{leaserouter.StateDead}})
		return err
	})
	s, err := r.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	qs, err := r.Queues(ctx)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	e, err := r.ExactStats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: ExactStats once %v", phase, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	eq, err := r.ExactQueues(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: ExactQueues once %v", phase, time.Since(start).Round(time.Millisecond))
	for st, n := range s.ByState() {
		exact := 0
		for est, en := range e.ByState() {
			if est == st {
				exact = en
			}
		}
		b.Logf("%s: %-9v Stats %9d ExactStats %9d (estimated: %v)", phase, st, n, exact, s.Estimated)
	}
	b.Logf("%s: Queues %+v", phase, qs)
	b.Logf("%s: ExactQueues %+v", phase, eq)
}
