package pgrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// otherPool is a pool of its own on db's database: another process, as
// far as the database can tell.
func otherPool(t *testing.T, db *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.NewWithConfig(t.Context(), db.Config().Copy())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// A pause is the queue's, in the database: a Router on another pool (a
// process of its own) grants nothing while it lasts, sees it in Stats and
// Queues, and may end it; other queues are not paused.
func TestPauseHoldsInEveryProcess(t *testing.T) {
	ctx := t.Context()
	db := pgtest.New(t)
	a := routerOn[int](t, db, pgrouter.Options{})
	b := routerOn[int](t, otherPool(t, db), pgrouter.Options{})
	other := routerOn[int](t, db, pgrouter.Options{Queue: "other"})
	require.NoError(t, a.Enqueue(ctx, "j1", 1))
	require.NoError(t, other.Enqueue(ctx, "o1", 1))
	require.NoError(t, a.Pause(ctx))

	_, err := b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "the other process grants nothing while paused")
	_, err = b.TryAcquireMany(ctx, "w", 10)
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	s, err := b.Stats(ctx)
	require.NoError(t, err)
	require.True(t, s.Paused)
	require.Equal(t, 1, s.Pending)
	qs, err := b.Queues(ctx)
	require.NoError(t, err)
	require.Equal(t, []pgrouter.QueueInfo{{Name: "default", Pending: 1, Paused: true}, {Name: "other", Pending: 1}}, qs)
	l, err := other.TryAcquire(ctx, "w")
	require.NoError(t, err, "another queue is not paused")
	require.NoError(t, l.Complete(ctx))

	require.NoError(t, b.Resume(ctx), "any process may resume")
	l, err = a.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "j1", l.JobID)
	s, err = a.Stats(ctx)
	require.NoError(t, err)
	require.False(t, s.Paused)
	qs, err = a.Queues(ctx)
	require.NoError(t, err)
	require.Equal(t, []pgrouter.QueueInfo{{Name: "default", Leased: 1}, {Name: "other", Succeeded: 1}}, qs)
}

// Resume wakes an Acquire waiting in another process at once (the
// notification), not at its next poll: the waiter polls once a minute,
// and its Router starts listening after the job's enqueue, whose
// notification it never sees.
func TestResumeWakesAcquireInEveryProcess(t *testing.T) {
	ctx := t.Context()
	db := pgtest.New(t)
	a := routerOn[int](t, db, pgrouter.Options{})
	require.NoError(t, a.Pause(ctx))
	require.NoError(t, a.Enqueue(ctx, "j1", 1))
	b := routerOn[int](t, otherPool(t, db), pgrouter.Options{PollInterval: time.Minute})
	eventually(t, 10*time.Second, "b's listener LISTENs", func() bool { return pgrouter.Listening(b) })
	got := make(chan *pgrouter.Lease[int], 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		l, err := b.Acquire(wctx, "w")
		if err == nil {
			got <- l
		}
		close(got)
	}()
	// Parked: blocked until a wake-up, its claim refused.
	eventually(t, 10*time.Second, "b's Acquire waits", func() bool { return pgrouter.Parked(b) == 1 })
	select {
	case <-got:
		t.Fatal("Acquire returned while paused")
	default:
	}
	start := time.Now()
	require.NoError(t, a.Resume(ctx))
	select {
	case l, ok := <-got:
		require.True(t, ok)
		require.Equal(t, "j1", l.JobID)
		require.NoError(t, l.Complete(ctx))
	case <-time.After(10 * time.Second): // far below the waiter's poll: a minute
		t.Fatalf("the waiting Acquire was not woken by Resume within %v", time.Since(start))
	}
}

// A page of List walks the order index of the jobs not leased, a state
// at a time, and the index of leased jobs in enqueue order
// (leaserouter_jobs_leased_seq), and stops at the page's end: no scan or
// sort of the queue or of the leases in flight, about a page of rows read
// a state, the leased state's too. With and without a filter by state, in
// the plan a connection keeps (generic) and in the first ones (custom),
// among 20,000 jobs of which 400 leased (a read of them all is four
// pages).
func TestListWalksTheOrderIndexAndTheLeasedJobsInOrder(t *testing.T) {
	const n, limit, leased = 20000, 101, 400
	db := youngQueue(t, n) // every other job leased, the rest pending
	_, err := db.Exec(t.Context(), `
		UPDATE leaserouter_jobs SET state = 'pending' WHERE state = 'leased' AND substr(id, 2)::int % 50 <> 0;
		UPDATE leaserouter_jobs SET state = 'succeeded', purge_at = now() + interval '1 hour'
			WHERE state = 'pending' AND substr(id, 2)::int % 20 = 3;
		ANALYZE leaserouter_jobs`)
	require.NoError(t, err)
	every := []string{"pending", "scheduled", "leased", "succeeded", "failed", "canceled"}
	for name, states := range map[string][]string{"every state": every, "pending": {"pending"}, "leased": {"leased"},
		"succeeded": {"succeeded"}, "succeeded or failed": {"succeeded", "failed"}, "leased or failed": {"leased", "failed"}} {
		for _, before := range []int64{math.MaxInt64, n / 2} {
			for _, generic := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/before=%d/generic=%v", name, before, generic), func(t *testing.T) {
					plan := explainList(t, db, generic, map[string]any{"queue": "default", "before": before,
						"states": states, "limit": int64(limit), "omit": true})
					var out []struct{ Plan planNode }
					require.NoError(t, json.Unmarshal(plan, &out))
					require.Equal(t, float64(limit), out[0].Plan.Rows, "a full page")
					withLeased := slices.Contains(states, "leased")
					bound := len(states) * (limit + 1) // a page a state, the leased one's too
					var sorted float64
					for _, s := range out[0].Plan.nodes("Sort") {
						sorted += s.Plans[0].Rows * s.Plans[0].Loops
					}
					require.LessOrEqual(t, int(sorted), bound, "sorts of more than a page a state:\n%s", plan)
					for _, typ := range []string{"Seq Scan", "Bitmap Heap Scan", "Index Only Scan"} {
						require.Empty(t, out[0].Plan.nodes(typ), "%s", plan)
					}
					var read, readLeased float64
					for _, s := range out[0].Plan.nodes("Index Scan") {
						switch s.Index {
						case "leaserouter_jobs_order_unleased":
							read += (s.Rows + s.Removed) * s.Loops
						case "leaserouter_jobs_leased_seq":
							readLeased += (s.Rows + s.Removed) * s.Loops
						default:
							t.Fatalf("index %s read:\n%s", s.Index, plan)
						}
					}
					require.LessOrEqual(t, int(read), len(states)*(limit+1), "rows of the order index read for a page of %d among %d:\n%s", limit, n, plan)
					if withLeased {
						require.Positive(t, readLeased, "the leased jobs not read:\n%s", plan)
						require.LessOrEqual(t, int(readLeased), limit+1, "leased jobs read for a page of %d among %d leased:\n%s", limit, leased, plan)
					} else {
						require.Zero(t, readLeased, "leases read for no leased state:\n%s", plan)
					}
				})
			}
		}
	}
}

// A page of List with an ID prefix reads about a page of rows a state
// when most of the newest jobs have the prefix, and when few do, at most
// the walk (prefixWalk) and the jobs with the prefix a state, from the
// index by ID (index only), never the whole state; the leased state, its
// jobs with the prefix, at most the leases in flight (10,000 here). Under
// the collation C, under C.UTF-8 (Debian's default: code point order, the
// primary key's order is byte order there too) and under ICU's root
// collation (where the IDs with a prefix are no range of the primary
// key), in the plan a connection keeps (generic) and in the first ones
// (custom), among 20,000 jobs.
func TestListPrefixReadsLittleUnderAnyCollation(t *testing.T) {
	const n, limit = 20000, 101
	walk := pgrouter.PrefixWalk(limit)
	for _, locale := range []string{"", "C.UTF-8", "icu:und"} {
		var db *pgxpool.Pool
		switch {
		case locale == "":
			db = pgtest.New(t)
		case strings.HasPrefix(locale, "icu:"):
			db = pgtest.NewICULocale(t, strings.TrimPrefix(locale, "icu:"))
		default:
			db = pgtest.NewLocale(t, locale)
		}
		fillYoungQueue(t, db, n) // j1 to j20000, every other one leased, the rest pending
		_, err := db.Exec(t.Context(), "ANALYZE leaserouter_jobs")
		require.NoError(t, err)
		every := []string{"pending", "scheduled", "leased", "succeeded", "failed", "canceled"}
		for _, c := range []struct {
			prefix         string
			found, pending int // on the page: of every state, pending
			bound          func(states int) int
		}{
			// j1, j10 to j19, ..., j10000 to j19999: more than half, the newest.
			{"j1", limit, limit, func(states int) int { return states*(limit+1)*3 + limit }},
			// j1234 (leased) and j12340 to j12349: the walk, then the index.
			{"j1234", 11, 5, func(states int) int { return states*walk + 11 + 11 }},
			// j5, ..., j5000 to j5999: a twentieth, none among the newest.
			{"j5", limit, limit, func(states int) int { return states*walk + 1111 + limit }},
		} {
			for name, states := range map[string][]string{"every state": every, "pending": {"pending"}} {
				for _, generic := range []bool{false, true} {
					t.Run(fmt.Sprintf("locale=%q/%s/generic=%v/prefix=%q", locale, name, generic, c.prefix), func(t *testing.T) {
						plan := explainStatement(t, db, "jobs_list_prefix", generic, map[string]any{"queue": "default",
							"before": int64(math.MaxInt64), "prefix": c.prefix, "end": pgrouter.PrefixEnd(c.prefix),
							"walk": walk, "omit": true, "states": states, "limit": int64(limit)})
						var out []struct{ Plan planNode }
						require.NoError(t, json.Unmarshal(plan, &out))
						want := c.found
						if len(states) == 1 {
							want = c.pending
						}
						require.Equal(t, float64(want), out[0].Plan.Rows, "%s", plan)
						require.Empty(t, out[0].Plan.tableScans(), "%s", plan)
						var read, leases float64
						for index, rows := range out[0].Plan.readBy() {
							if leasedIndex(index) {
								leases += rows
							} else {
								read += rows
							}
						}
						require.LessOrEqual(t, int(read), c.bound(len(states)), "rows read for a page of %d among %d:\n%s", limit, n, plan)
						// The leased state's range: at most the leases in flight.
						require.LessOrEqual(t, int(leases), n/2, "%s", plan)
					})
				}
			}
		}
	}
}

// A page of List with an ID prefix rare among the leased jobs finds them
// walking the index of leased jobs in enqueue order
// (leaserouter_jobs_leased_seq) with the ID range checked on its entries
// (an Index Cond, not a Filter of the rows fetched): the rows read are
// the hits only, not every lease in flight; and the other states' jobs
// with the prefix in the index of the jobs not leased
// (leaserouter_jobs_id_unleased), index only. Under the collation C and
// ICU's root collation, in the generic and the custom plans, among
// 20,000 jobs of which 10,000 leased.
func TestListPrefixFindsLeasedJobsByTheirIDsInTheLeasedIndex(t *testing.T) {
	const n, limit = 20000, 101
	walk := pgrouter.PrefixWalk(limit)
	for _, locale := range []string{"", "icu:und"} {
		var db *pgxpool.Pool
		if locale == "" {
			db = pgtest.New(t)
		} else {
			db = pgtest.NewICULocale(t, strings.TrimPrefix(locale, "icu:"))
		}
		fillYoungQueue(t, db, n) // j1 to j20000, the even ones leased, the rest pending
		_, err := db.Exec(t.Context(), "ANALYZE leaserouter_jobs")
		require.NoError(t, err)
		for _, c := range []struct {
			name   string
			states []string
			found  int
			ranges map[string]string // index: the node type reading it
		}{
			// j1234 and j12340 to j12349: six leased, five pending.
			{"leased", []string{"leased"}, 6, map[string]string{"leaserouter_jobs_leased_seq": "Index Only Scan"}},
			{"every state", []string{"pending", "scheduled", "leased", "succeeded", "failed", "canceled"}, 11,
				map[string]string{"leaserouter_jobs_leased_seq": "Index Only Scan", "leaserouter_jobs_id_unleased": "Index Only Scan"}},
		} {
			for _, generic := range []bool{false, true} {
				t.Run(fmt.Sprintf("locale=%q/%s/generic=%v", locale, c.name, generic), func(t *testing.T) {
					plan := explainStatement(t, db, "jobs_list_prefix", generic, map[string]any{"queue": "default",
						"before": int64(math.MaxInt64), "prefix": "j1234", "end": pgrouter.PrefixEnd("j1234"),
						"walk": walk, "omit": true, "states": c.states, "limit": int64(limit)})
					var out []struct{ Plan planNode }
					require.NoError(t, json.Unmarshal(plan, &out))
					require.Equal(t, float64(c.found), out[0].Plan.Rows, "%s", plan)
					require.Empty(t, out[0].Plan.tableScans(), "%s", plan)
					used := map[string]string{}
					for _, typ := range []string{"Index Scan", "Index Only Scan", "Bitmap Index Scan"} {
						for _, s := range out[0].Plan.nodes(typ) {
							if s.Index != "leaserouter_jobs_order_unleased" && s.Index != "leaserouter_jobs_leased" && s.Index != "leaserouter_jobs_pkey" && s.Loops > 0 {
								used[s.Index] = typ
							}
						}
					}
					require.Equal(t, c.ranges, used, "the ranges by ID read:\n%s", plan)
					// The leased range: its ID range an Index Cond, the hits the
					// only rows returned or filtered out.
					var leasedHits float64
					for _, typ := range []string{"Index Scan", "Index Only Scan"} {
						for _, s := range out[0].Plan.nodes(typ) {
							if s.Index != "leaserouter_jobs_leased_seq" || s.Loops == 0 {
								continue
							}
							require.Contains(t, s.Cond, "(id >= ", "%s", plan)
							require.Contains(t, s.Cond, "(id < ", "%s", plan)
							require.NotContains(t, s.Filter, "(id >= ", "%s", plan)
							leasedHits += (s.Rows + s.Removed) * s.Loops
						}
					}
					require.Equal(t, float64(6), leasedHits, "leased rows read for 6 with the prefix among 10,000:\n%s", plan)
					var read float64
					for _, rows := range out[0].Plan.readBy() {
						read += rows
					}
					require.LessOrEqual(t, int(read), len(c.states)*walk+11+c.found, "rows read:\n%s", plan)
				})
			}
		}
	}
}

// During a rolling upgrade, a process of an earlier version lists by ID
// prefix with its own statement (testdata): schema 22's, which reads
// leaserouter_jobs_id by state, leased too (dropped by version 25); and
// schemas 25's and 27's, which read the leased jobs with the prefix from
// leaserouter_jobs_id_leased (dropped by version 29). On the latest
// schema its pages are List's, the same jobs in the same order (read
// another way), in the generic plan and the custom ones.
func TestListPrefixOfAnEarlierVersionFindsTheSamePage(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	fillYoungQueue(t, db, 20000) // j1 to j20000, the even ones leased, the rest pending
	_, err := db.Exec(ctx, "ANALYZE leaserouter_jobs")
	require.NoError(t, err)
	for _, version := range []int{22, 25, 27} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			old, err := os.ReadFile(filepath.Join("testdata", fmt.Sprintf("jobs_list_prefix_v%d.sql", version)))
			require.NoError(t, err)
			listPrefixAsEarlierVersion(t, db, string(old))
		})
	}
}

// listPrefixAsEarlierVersion runs old, an earlier version's
// jobs_list_prefix, on db's queue (fillYoungQueue's) and requires List's
// pages of it.
func listPrefixAsEarlierVersion(t *testing.T, db *pgxpool.Pool, old string) {
	t.Helper()
	ctx := t.Context()
	r := routerOn[int](t, db, pgrouter.Options{})
	const limit = 101
	for _, prefix := range []string{"j1", "j1234", "j5", "x"} {
		for name, states := range map[string][]leaserouter.State{
			"every state": nil,
			"leased":      {leaserouter.StateLeased},
			"pending":     {leaserouter.StatePending},
		} {
			page, err := r.List(ctx, leaserouter.ListParams{IDPrefix: prefix, States: states, Limit: limit, OmitPayload: true})
			require.NoError(t, err)
			var want []string
			for _, j := range page.Jobs {
				want = append(want, j.ID)
			}
			require.Equal(t, prefix == "x", len(want) == 0, "prefix %q, %s: %v", prefix, name, want)
			names := []string{"pending", "scheduled", "leased", "succeeded", "failed", "canceled"}
			if states != nil {
				names = []string{states[0].String()}
			}
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				t.Run(fmt.Sprintf("%s/%s/%s", prefix, name, mode), func(t *testing.T) {
					var got []string
					err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
							return err
						}
						rows, err := tx.Query(ctx, string(old), pgx.StrictNamedArgs{"queue": "default", "before": int64(math.MaxInt64),
							"prefix": prefix, "end": pgrouter.PrefixEnd(prefix), "walk": pgrouter.PrefixWalk(limit),
							"omit": true, "states": names, "limit": int64(limit)})
						if err != nil {
							return err
						}
						defer rows.Close()
						for rows.Next() {
							got = append(got, string(rows.RawValues()[0])) // j.id, text
						}
						return rows.Err()
					})
					require.NoError(t, err)
					require.Equal(t, want, got, "the earlier statement's page")
				})
			}
		}
	}
}

// explainList is EXPLAIN (ANALYZE, FORMAT JSON) of jobs_list with values:
// its custom plan, or with generic its generic plan.
func explainList(t *testing.T, db *pgxpool.Pool, generic bool, values map[string]any) []byte {
	t.Helper()
	return explainStatement(t, db, "jobs_list", generic, values)
}

// leasedIndex tells the indexes of leased jobs only: reading one reads at
// most the leases in flight.
func leasedIndex(index string) bool {
	return index == "leaserouter_jobs_leased" || index == "leaserouter_jobs_leased_seq"
}

// readBy sums the rows n's scans (n included) read, returned or filtered
// out over all their loops, by the index each reads: a bitmap heap scan
// under its bitmap index's name, a sequential scan under "".
func (n planNode) readBy() map[string]float64 {
	by := map[string]float64{}
	var walk func(planNode)
	walk = func(p planNode) {
		switch p.Type {
		case "Seq Scan", "Index Scan", "Index Only Scan":
			by[p.Index] += (p.Rows + p.Removed) * p.Loops
		case "Bitmap Heap Scan":
			index := ""
			for _, c := range p.nodes("Bitmap Index Scan") {
				index = c.Index
			}
			by[index] += (p.Rows + p.Removed) * p.Loops
		}
		for _, c := range p.Plans {
			walk(c)
		}
	}
	walk(n)
	return by
}

// tableScans lists n's sequential scans and its bitmap heap scans other
// than of an index of leased jobs (which read at most the leases in
// flight).
func (n planNode) tableScans() []planNode {
	scans := n.nodes("Seq Scan")
	for _, b := range n.nodes("Bitmap Heap Scan") {
		for _, i := range b.nodes("Bitmap Index Scan") {
			if !leasedIndex(i.Index) {
				scans = append(scans, b)
				break
			}
		}
	}
	return scans
}

// nodes lists the nodes of n (itself included) of type typ.
func (n planNode) nodes(typ string) []planNode {
	var out []planNode
	if n.Type == typ {
		out = append(out, n)
	}
	for _, c := range n.Plans {
		out = append(out, c.nodes(typ)...)
	}
	return out
}

// A List cursor holds its queue: one made by a Router of queue A, used on
// queue B's Router (where the enqueue orders of A's jobs are positions
// too, as the queues share one sequence), is refused with
// ErrInvalidOptions, as a cursor made under other filters is, rather than
// read as a position among B's jobs; on queue A, in another process, it
// goes on where its page ended.
func TestListRefusesAnotherQueuesCursor(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	a := routerOn[int](t, db, pgrouter.Options{Queue: "a"})
	b := routerOn[int](t, db, pgrouter.Options{Queue: "b"})
	for i := range 3 {
		require.NoError(t, b.Enqueue(ctx, fmt.Sprintf("b%d", i), i))
		require.NoError(t, a.Enqueue(ctx, fmt.Sprintf("a%d", i), i))
	}
	page, err := a.List(ctx, leaserouter.ListParams{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "a2", page.Jobs[0].ID)
	require.NotEmpty(t, page.NextCursor)

	other, err := b.List(ctx, leaserouter.ListParams{Limit: 1, Cursor: page.NextCursor})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "queue a's cursor on queue b: %v", other.Jobs)
	require.ErrorContains(t, err, "another queue")
	require.Empty(t, other.Jobs)

	again := routerOn[int](t, otherPool(t, db), pgrouter.Options{Queue: "a"})
	next, err := again.List(ctx, leaserouter.ListParams{Limit: 1, Cursor: page.NextCursor})
	require.NoError(t, err)
	require.Equal(t, "a1", next.Jobs[0].ID)
}

// During a rolling upgrade, a process of a version before schema 26
// lists and counts with its own statements (testdata: those of schema
// 25, which walk leaserouter_jobs_order by state, leased too): on a
// schema where version 27 dropped that index, its pages are List's, the
// same jobs in the same order, and its exact counts ExactStats' (read
// another way: its walks name no state <> 'leased' for the partial
// index), in the generic plan and the custom ones.
func TestListAndCountsOfAVersionBefore26FindTheSameJobs(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	fillYoungQueue(t, db, 20000) // j1 to j20000, the even ones leased, the rest pending
	_, err := db.Exec(ctx, `UPDATE leaserouter_jobs SET state = 'succeeded', purge_at = now() + interval '1 hour'
			WHERE state = 'pending' AND substr(id, 2)::int % 20 = 3;
		ANALYZE leaserouter_jobs`)
	require.NoError(t, err)
	oldList, err := os.ReadFile(filepath.Join("testdata", "jobs_list_v25.sql"))
	require.NoError(t, err)
	oldStats, err := os.ReadFile(filepath.Join("testdata", "job_stats_v25.sql"))
	require.NoError(t, err)
	r := routerOn[int](t, db, pgrouter.Options{})
	exact, err := r.ExactStats(ctx)
	require.NoError(t, err)
	const limit = 101
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		inTx := func(f func(tx pgx.Tx) error) {
			require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
					return err
				}
				return f(tx)
			}))
		}
		for name, states := range map[string][]leaserouter.State{
			"every state":         nil,
			"leased":              {leaserouter.StateLeased},
			"leased or succeeded": {leaserouter.StateLeased, leaserouter.StateSucceeded},
			"pending":             {leaserouter.StatePending},
		} {
			t.Run(fmt.Sprintf("list/%s/%s", name, mode), func(t *testing.T) {
				names := []string{"pending", "scheduled", "leased", "succeeded", "failed", "canceled"}
				if states != nil {
					names = nil
					for _, s := range states {
						names = append(names, pgrouter.StateLabel(s))
					}
				}
				for _, before := range []int64{math.MaxInt64, 10001} {
					var want []string
					p := leaserouter.ListParams{States: states, Limit: limit, OmitPayload: true}
					if before != math.MaxInt64 {
						first, err := r.List(ctx, leaserouter.ListParams{States: states, Limit: limit, OmitPayload: true})
						require.NoError(t, err)
						p.Cursor = first.NextCursor
						before = -1 // below: the seq of the first page's last job
						inTx(func(tx pgx.Tx) error {
							return tx.QueryRow(ctx, "SELECT seq FROM leaserouter_jobs WHERE queue = 'default' AND id = $1",
								first.Jobs[len(first.Jobs)-1].ID).Scan(&before)
						})
					}
					page, err := r.List(ctx, p)
					require.NoError(t, err)
					for _, j := range page.Jobs {
						want = append(want, j.ID)
					}
					require.Len(t, want, limit)
					var got []string
					inTx(func(tx pgx.Tx) error {
						rows, err := tx.Query(ctx, string(oldList), pgx.StrictNamedArgs{"queue": "default", "before": before,
							"omit": true, "states": names, "limit": int64(limit)})
						if err != nil {
							return err
						}
						defer rows.Close()
						for rows.Next() {
							got = append(got, string(rows.RawValues()[0])) // id, text
						}
						return rows.Err()
					})
					require.Equal(t, want, got, "the earlier statement's page below %d", before)
				}
			})
		}
		t.Run("counts/"+mode, func(t *testing.T) {
			got := map[string]int{}
			inTx(func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, string(oldStats), pgx.StrictNamedArgs{"queue": "default", "cap": nil})
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var state string
					var n int
					var estimated bool
					if err := rows.Scan(&state, &n, &estimated); err != nil {
						return err
					}
					got[state] = n
				}
				return rows.Err()
			})
			require.Equal(t, map[string]int{"pending": exact.Pending, "scheduled": exact.Scheduled, "leased": exact.Leased,
				"succeeded": exact.Succeeded, "failed": exact.DeadJobs, "canceled": exact.Canceled}, got)
			require.Equal(t, 10000, exact.Leased)
		})
	}
}
