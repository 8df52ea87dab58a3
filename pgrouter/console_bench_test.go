package pgrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// BenchmarkConsolePagesAt10M measures each console page's server time
// over pgrouter at 10M rows (LEASEROUTER_SCALE_ROWS) on a database of
// collation C.UTF-8 (Debian's default), p50/p99 of 20 requests a page:
// first with the table analyzed but not vacuumed, then after a VACUUM.
// The rows are BenchmarkStatsAt10M's (fillJobs: queue "big", IDs j0 to
// j9999999, by i % 100 60% succeeded, 20% pending, 10% scheduled, 5%
// dead, 4% canceled, 1% leased). It also times Stats with the cap of
// exact counts at 5k to 100k (each of the six states counted up to the
// cap) and, with LEASEROUTER_BASELINE_LIST_SQL naming a file of an
// earlier jobs_list statement, a page with an ID prefix by that statement
// (the baseline) next to List's. Heavy (tens of minutes, ~5 GB of disk):
//
//	LEASEROUTER_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkConsolePagesAt10M -benchtime 1x -timeout 90m ./pgrouter/
func BenchmarkConsolePagesAt10M(b *testing.B) {
	ctx := context.Background()
	n := envInt("LEASEROUTER_SCALE_ROWS", 10_000_000)
	db := pgtest.NewLocale(b, "C.UTF-8")
	start := time.Now()
	fillJobs(b, db, n)
	b.Logf("%d rows written and indexed in %v", n+5000, time.Since(start).Round(time.Second))
	r, err := pgrouter.New[json.RawMessage](ctx, db, pgrouter.Options{Queue: "big", NoVacuum: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = r.Close(ctx) }()
	h, err := console.New(console.Options{}, r)
	if err != nil {
		b.Fatal(err)
	}
	mid := fmt.Sprintf("j%d", n/2)
	rare := fmt.Sprintf("j%d", n/10+1234) // it and the ten after it with one more digit
	pages := []string{"/", "/jobs?queue=big", "/jobs?queue=big&state=pending", "/jobs?queue=big&state=failed",
		"/jobs?queue=big&state=leased",
		"/jobs?queue=big&prefix=" + rare, "/jobs?queue=big&state=failed&prefix=" + rare,
		"/jobs?queue=big&prefix=j1", "/jobs?queue=big&prefix=j5", "/jobs?queue=big&state=pending&prefix=j5",
		"/leases", "/dead?queue=big", "/job?queue=big&id=" + mid}
	for b.Loop() {
		execSQL(b, db, "ANALYZE leaserouter_jobs")
		timePages(b, h, 20, "analyzed", pages...)
		countCosts(b, r, "analyzed")
		start = time.Now()
		execSQL(b, db, "VACUUM (ANALYZE) leaserouter_jobs")
		b.Logf("VACUUM (ANALYZE) in %v", time.Since(start).Round(time.Millisecond))
		timePages(b, h, 20, "vacuumed", pages...)
		countCosts(b, r, "vacuumed")
		timePages(b, h, 1, "vacuumed", "/?exact=big")
		baselinePrefix(b, r, db, rare)
	}
}

// countCosts logs p50/p99 of 10 Stats with the cap of exact counts at 5k
// to 100k (each state with more jobs walks cap+1 entries, then is
// estimated), then puts the cap back.
func countCosts(b *testing.B, r *pgrouter.Router[json.RawMessage], phase string) {
	ctx := context.Background()
	for _, cap := range []int64{5_000, 10_000, 20_000, 50_000, 100_000} {
		pgrouter.SetCountCap(r, cap)
		var l latencies
		for range 10 {
			start := time.Now()
			if _, err := r.Stats(ctx); err != nil {
				b.Fatal(err)
			}
			l = append(l, time.Since(start))
		}
		slices.Sort(l)
		b.Logf("%s: Stats counting up to %d a state (six states over it): p50 %.2fms p99 %.2fms", phase, cap, ms(l.q(0.5)), ms(l.q(0.99)))
	}
	pgrouter.SetCountCap(r, pgrouter.CountCap)
}

// baselinePrefix times a first page with ID prefix rare (all states, the
// default page) by List and by the statement in the file
// LEASEROUTER_BASELINE_LIST_SQL (an earlier jobs_list.sql: named
// parameters queue, before, prefix, states, limit), run as before
// migration 0011 (in a transaction that drops the indexes by ID,
// rolled back: the planner cannot use them), in a
// custom and a generic plan, alternated, 10 each.
func baselinePrefix(b *testing.B, r *pgrouter.Router[json.RawMessage], db *pgxpool.Pool, rare string) {
	path := os.Getenv("LEASEROUTER_BASELINE_LIST_SQL")
	if path == "" {
		return
	}
	old, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	every := []string{"pending", "scheduled", "leased", "succeeded", "failed", "canceled"}
	earlier := func(mode string) time.Duration {
		tx, err := db.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for _, sql := range []string{"DROP INDEX IF EXISTS leaserouter_jobs_id_unleased, leaserouter_jobs_id_leased", "SET LOCAL plan_cache_mode = " + mode} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		rows, err := tx.Query(ctx, string(old), pgx.StrictNamedArgs{"queue": "big", "before": int64(1<<63 - 1),
			"prefix": rare, "states": every, "limit": 101})
		if err != nil {
			b.Fatal(err)
		}
		rows.Close()
		if rows.Err() != nil {
			b.Fatal(rows.Err())
		}
		return time.Since(start)
	}
	var custom, generic, cand latencies
	for range 10 {
		custom = append(custom, earlier("force_custom_plan"))
		generic = append(generic, earlier("force_generic_plan"))
		start := time.Now()
		if _, err := r.List(ctx, leaserouter.ListParams{IDPrefix: rare, OmitPayload: true}); err != nil {
			b.Fatal(err)
		}
		cand = append(cand, time.Since(start))
	}
	for _, l := range []latencies{custom, generic, cand} {
		slices.Sort(l)
	}
	b.Logf("prefix %q, first page: earlier statement without the index: custom plan p50 %.2fms p99 %.2fms, generic plan p50 %.2fms p99 %.2fms; List p50 %.2fms p99 %.2fms",
		rare, ms(custom.q(0.5)), ms(custom.q(0.99)), ms(generic.q(0.5)), ms(generic.q(0.99)), ms(cand.q(0.5)), ms(cand.q(0.99)))
}
