package pgrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

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

// A page of List walks the order index, a state at a time, and stops at
// the page's end: no scan or sort of the queue, about a page of rows read
// a state, with and without a filter by state, in the plan a connection
// keeps (generic) and in the first ones (custom), among 20,000 jobs.
func TestListWalksTheOrderIndex(t *testing.T) {
	const n, limit = 20000, 101
	db := youngQueue(t, n) // every other job leased, the rest pending
	_, err := db.Exec(t.Context(), `
		UPDATE leaserouter_jobs SET state = 'succeeded', purge_at = now() + interval '1 hour'
			WHERE state = 'pending' AND substr(id, 2)::int % 20 = 3;
		ANALYZE leaserouter_jobs`)
	require.NoError(t, err)
	every := []string{"pending", "scheduled", "leased", "succeeded", "failed", "canceled"}
	for name, states := range map[string][]string{"every state": every, "pending": {"pending"},
		"succeeded": {"succeeded"}, "succeeded or failed": {"succeeded", "failed"}} {
		for _, before := range []int64{math.MaxInt64, n / 2} {
			for _, c := range []struct {
				generic bool
				prefix  string
			}{{false, ""}, {true, ""}} {
				t.Run(fmt.Sprintf("%s/before=%d/generic=%v/prefix=%q", name, before, c.generic, c.prefix), func(t *testing.T) {
					plan := explainList(t, db, c.generic, map[string]any{"queue": "default", "before": before,
						"prefix": c.prefix, "states": states, "limit": int64(limit)})
					var out []struct{ Plan planNode }
					require.NoError(t, json.Unmarshal(plan, &out))
					require.Equal(t, float64(limit), out[0].Plan.Rows, "a full page")
					for _, s := range out[0].Plan.nodes("Sort") {
						require.LessOrEqual(t, s.Plans[0].Rows*s.Plans[0].Loops, float64(len(states)*limit),
							"a sort of more than a page a state:\n%s", plan)
					}
					var read float64
					for _, typ := range []string{"Seq Scan", "Bitmap Heap Scan", "Index Only Scan"} {
						require.Empty(t, out[0].Plan.nodes(typ), "%s", plan)
					}
					scans := out[0].Plan.nodes("Index Scan")
					require.NotEmpty(t, scans)
					for _, s := range scans {
						require.Equal(t, "leaserouter_jobs_order", s.Index, "%s", plan)
						read += (s.Rows + s.Removed) * s.Loops
					}
					bound := len(states) * (limit + 1)
					require.LessOrEqual(t, int(read), bound, "rows read for a page of %d among %d:\n%s", limit, n, plan)
				})
			}
		}
	}
}

// A page of List with an ID prefix reads about a page of rows a state
// when most of the newest jobs have the prefix, and when few do, at most
// the walk (prefixWalk) and the jobs with the prefix a state, from the
// index by ID (index only), never the whole state: under the collation
// C, under C.UTF-8 (Debian's default: code point order, the primary key's
// order is byte order there too) and under ICU's root collation (where
// the IDs with a prefix are no range of the primary key), in the plan a
// connection keeps (generic) and in the first ones (custom), among
// 20,000 jobs.
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
						for _, typ := range []string{"Seq Scan", "Bitmap Heap Scan"} {
							require.Empty(t, out[0].Plan.nodes(typ), "%s", plan)
						}
						var read float64
						for _, typ := range []string{"Index Scan", "Index Only Scan"} {
							for _, s := range out[0].Plan.nodes(typ) {
								read += (s.Rows + s.Removed) * s.Loops
							}
						}
						require.LessOrEqual(t, int(read), c.bound(len(states)), "rows read for a page of %d among %d:\n%s", limit, n, plan)
					})
				}
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
