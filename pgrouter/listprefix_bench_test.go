package pgrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// BenchmarkListPrefixPages measures List's pages with an ID prefix at
// scale, server time p50/p99 of 20 pages each (OmitPayload, as the
// console's), on BenchmarkStatsAt10M's rows (fillJobs: 1% leased, 20%
// pending, 60% succeeded, ...) in a database of collation C.UTF-8, first
// analyzed, then vacuumed: a prefix rare (one job, or eleven) and common
// (j5: one job in nine), of every state, of the leased state, and of one
// other; it logs the size of the indexes by ID. With
// LEASEROUTER_EARLIER_PREFIX_SQL naming an earlier version's
// jobs_list_prefix.sql (testdata/jobs_list_prefix_v22.sql), it times that
// statement's page of a rare prefix too, as a process of that version
// runs it during a rolling upgrade. Run it on two versions one after the
// other to compare their schemas and statements:
//
//	LEASEROUTER_SCALE_ROWS=1000000 LEASEROUTER_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkListPrefixPages -benchtime 1x -timeout 60m ./pgrouter/
func BenchmarkListPrefixPages(b *testing.B) {
	ctx := context.Background()
	n := envInt("LEASEROUTER_SCALE_ROWS", 1_000_000)
	db := pgtest.NewLocale(b, "C.UTF-8")
	fillJobs(b, db, n)
	r, err := pgrouter.New[json.RawMessage](ctx, db, pgrouter.Options{Queue: "big", NoVacuum: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = r.Close(ctx) }()
	rare := fmt.Sprintf("j%d", n/10+1234) // succeeded (i % 100 = 34); at 10M rows, ten more of one more digit
	leased := fmt.Sprintf("j%d", n/10+99) // itself leased (i % 100 = 99)
	states := func(s ...leaserouter.State) []leaserouter.State { return s }
	pages := []struct {
		name string
		p    leaserouter.ListParams
	}{
		{"every state, rare prefix", leaserouter.ListParams{IDPrefix: rare}},
		{"every state, leased rare prefix", leaserouter.ListParams{IDPrefix: leased}},
		{"every state, prefix j5", leaserouter.ListParams{IDPrefix: "j5"}},
		{"leased, rare prefix", leaserouter.ListParams{IDPrefix: rare, States: states(leaserouter.StateLeased)}},
		{"leased, leased rare prefix", leaserouter.ListParams{IDPrefix: leased, States: states(leaserouter.StateLeased)}},
		{"leased, prefix j5", leaserouter.ListParams{IDPrefix: "j5", States: states(leaserouter.StateLeased)}},
		{"dead, rare prefix", leaserouter.ListParams{IDPrefix: rare, States: states(leaserouter.StateDead)}},
		{"pending, prefix j5", leaserouter.ListParams{IDPrefix: "j5", States: states(leaserouter.StatePending)}},
	}
	for b.Loop() {
		var sizes string
		if err := db.QueryRow(ctx, `SELECT string_agg(format('%s %s', indexrelid::regclass, pg_size_pretty(pg_relation_size(indexrelid))), ', ' ORDER BY 1)
			FROM pg_index WHERE indexrelid::regclass::text LIKE 'leaserouter_jobs_id%' OR indexrelid::regclass::text = 'leaserouter_jobs_leased_seq'`).Scan(&sizes); err != nil {
			b.Fatal(err)
		}
		b.Logf("%d rows; indexes by ID (and of leased jobs in seq order): %s", n+5000, sizes)
		for _, phase := range []string{"ANALYZE", "VACUUM (ANALYZE)"} {
			execSQL(b, db, phase+" leaserouter_jobs")
			for _, pg := range pages {
				pg.p.OmitPayload = true
				var l latencies
				for range 20 {
					start := time.Now()
					if _, err := r.List(ctx, pg.p); err != nil {
						b.Fatal(err)
					}
					l = append(l, time.Since(start))
				}
				slices.Sort(l)
				b.Logf("after %-16s %-32s p50 %7.2fms p99 %7.2fms", phase+":", pg.name+":", ms(l.q(0.5)), ms(l.q(0.99)))
			}
			earlierPrefix(b, db, phase, rare)
		}
	}
}

// earlierPrefix times, with LEASEROUTER_EARLIER_PREFIX_SQL naming a file
// of an earlier jobs_list_prefix statement (a process of an earlier
// version during a rolling upgrade), a page of every state with the ID
// prefix rare by that statement on this schema, in a custom and a
// generic plan, 10 each.
func earlierPrefix(b *testing.B, db *pgxpool.Pool, phase, rare string) {
	path := os.Getenv("LEASEROUTER_EARLIER_PREFIX_SQL")
	if path == "" {
		return
	}
	old, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		var l latencies
		for range 10 {
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
					return err
				}
				start := time.Now()
				rows, err := tx.Query(ctx, string(old), pgx.StrictNamedArgs{"queue": "big", "before": int64(math.MaxInt64),
					"prefix": rare, "end": pgrouter.PrefixEnd(rare), "walk": pgrouter.PrefixWalk(101), "omit": true,
					"states": []string{"pending", "scheduled", "leased", "succeeded", "failed", "canceled"}, "limit": int64(101)})
				if err != nil {
					return err
				}
				rows.Close()
				l = append(l, time.Since(start))
				return rows.Err()
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		slices.Sort(l)
		b.Logf("after %-16s every state, rare prefix, earlier statement (%s): p50 %7.2fms p99 %7.2fms", phase+":", mode, ms(l.q(0.5)), ms(l.q(0.99)))
	}
}
