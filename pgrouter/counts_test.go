package pgrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// countOpts: a Router whose maintenance loop never runs during a test
// (finished jobs past their retention stay in the table, as when no
// process has purged them yet) and never analyzes the table itself.
func countOpts(queue string) pgrouter.Options {
	return pgrouter.Options{Queue: queue, PollInterval: time.Hour, NoVacuum: true}
}

// addJobs writes n jobs of queue in state st directly (ids prefix0..),
// finished ones retained for an hour, or past their retention (purge_at
// an hour ago) with past.
func addJobs(t *testing.T, db *pgxpool.Pool, queue, prefix string, st leaserouter.State, n int, past bool) {
	t.Helper()
	purge := "now() + interval '1 hour'"
	if past {
		purge = "now() - interval '1 hour'"
	}
	_, err := db.Exec(t.Context(), fmt.Sprintf(`INSERT INTO leaserouter_jobs (queue, id, state, ready_at, max_attempts,
			payload, created_at, updated_at, purge_at, lease_expires_at, owner, attempt, token)
		SELECT $1, $2 || i, $3::text::leaserouter_job_state,
			CASE WHEN $3 = 'scheduled' THEN now() + interval '1 hour' ELSE now() END, 3, '1', now(), now(),
			CASE WHEN $3 IN ('succeeded', 'failed', 'canceled') THEN %s END,
			CASE WHEN $3 = 'leased' THEN now() + interval '1 hour' END,
			CASE WHEN $3 = 'leased' THEN 'w' ELSE '' END, 1, 1
		FROM generate_series(1, $4::int) AS i`, purge), queue, prefix, pgrouter.StateLabel(st), n)
	require.NoError(t, err)
}

// counts are a Stats' or QueueInfo's counts by state.
type counts [6]int

func countsOf(s leaserouter.Stats) counts {
	return counts{s.Pending, s.Scheduled, s.Leased, s.Succeeded, s.DeadJobs, s.Canceled}
}

func queueCounts(q pgrouter.QueueInfo) counts {
	return counts{q.Pending, q.Scheduled, q.Leased, q.Succeeded, q.Dead, q.Canceled}
}

// queueNamed is the QueueInfo of name in qs.
func queueNamed(t *testing.T, qs []pgrouter.QueueInfo, name string) pgrouter.QueueInfo {
	t.Helper()
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("queue %q not in %+v", name, qs)
	return pgrouter.QueueInfo{}
}

// TestCountsExactBelowTheCap: a queue with at most the cap's jobs in each
// state is counted exactly by Stats and Queues (every state, finished
// jobs past their retention left out), with Estimated false; ExactStats
// and ExactQueues agree.
func TestCountsExactBelowTheCap(t *testing.T) {
	r, db := newRouter[int](t, countOpts("q"))
	pgrouter.SetCountCap(r, 20)
	want := counts{20, 11, 12, 13, 14, 15}
	for st, n := range want {
		addJobs(t, db, "q", fmt.Sprintf("s%d-", st), leaserouter.State(st), n, false)
	}
	// Past retention: not counted (each state still within the cap).
	addJobs(t, db, "q", "old-s-", leaserouter.StateSucceeded, 7, true)
	addJobs(t, db, "q", "old-d-", leaserouter.StateDead, 6, true)
	addJobs(t, db, "q", "old-c-", leaserouter.StateCanceled, 5, true)
	addJobs(t, db, "other", "x", leaserouter.StatePending, 19, false) // another queue: not counted
	ctx := t.Context()

	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, want, countsOf(s))
	//lint:ignore SA1019 the deprecated name is what is checked
	require.Equal(t, s.DeadJobs, s.Failed, "the deprecated name counts the dead jobs too")
	require.False(t, s.Estimated)
	e, err := r.ExactStats(ctx)
	require.NoError(t, err)
	require.Equal(t, want, countsOf(e))
	require.False(t, e.Estimated)

	for _, queues := range []func(context.Context) ([]pgrouter.QueueInfo, error){r.Queues, r.ExactQueues} {
		qs, err := queues(ctx)
		require.NoError(t, err)
		require.Len(t, qs, 2)
		q := queueNamed(t, qs, "q")
		require.Equal(t, want, queueCounts(q))
		require.Equal(t, q.Dead, q.Failed, "the deprecated name counts the dead jobs too")
		require.False(t, q.Estimated)
		o := queueNamed(t, qs, "other")
		require.Equal(t, counts{19}, queueCounts(o))
		require.False(t, o.Estimated)
	}

	// A queue whose only jobs are past their retention is not listed.
	addJobs(t, db, "gone", "g", leaserouter.StateSucceeded, 3, true)
	qs, err := r.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 2)
}

// TestCountsEstimatedAboveTheCap: a state with more jobs than the cap is
// estimated, from the planner's statistics after ANALYZE, within a
// generous factor of the truth even where queues' states differ (the
// joint statistics of queue and state: assumed independent, each
// estimate below would be about half the truth); Stats.Estimated and
// QueueInfo.Estimated say so, a queue within the cap is still exact, and
// ExactStats and ExactQueues count exactly.
func TestCountsEstimatedAboveTheCap(t *testing.T) {
	r, db := newRouter[int](t, countOpts("a"))
	pgrouter.SetCountCap(r, 100)
	addJobs(t, db, "a", "as", leaserouter.StateSucceeded, 4000, false)
	addJobs(t, db, "a", "ap", leaserouter.StatePending, 60, false)
	addJobs(t, db, "a", "ac", leaserouter.StateCanceled, 10, false) // exact, after an estimated state
	addJobs(t, db, "b", "bp", leaserouter.StatePending, 4000, false)
	addJobs(t, db, "b", "bs", leaserouter.StateSucceeded, 200, false)
	addJobs(t, db, "small", "s", leaserouter.StateDead, 50, false)
	_, err := db.Exec(t.Context(), "ANALYZE leaserouter_jobs")
	require.NoError(t, err)
	ctx := t.Context()

	near := func(what string, truth, got int) {
		t.Helper()
		require.True(t, float64(got) >= float64(truth)/1.5 && float64(got) <= float64(truth)*1.5,
			"%s: estimate %d, truth %d", what, got, truth)
	}
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.True(t, s.Estimated)
	near("a succeeded", 4000, s.Succeeded)
	require.Equal(t, 60, s.Pending) // within the cap: exact
	require.Zero(t, s.DeadJobs)
	e, err := r.ExactStats(ctx)
	require.NoError(t, err)
	require.False(t, e.Estimated)
	require.Equal(t, counts{60, 0, 0, 4000, 0, 10}, countsOf(e))

	qs, err := r.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 3)
	a, b, small := queueNamed(t, qs, "a"), queueNamed(t, qs, "b"), queueNamed(t, qs, "small")
	require.True(t, a.Estimated)
	near("Queues a succeeded", 4000, a.Succeeded)
	require.Equal(t, 60, a.Pending)
	require.Equal(t, 10, a.Canceled)
	require.True(t, b.Estimated)
	near("Queues b pending", 4000, b.Pending)
	near("Queues b succeeded", 200, b.Succeeded)
	require.False(t, small.Estimated)
	require.Equal(t, counts{4: 50}, queueCounts(small))
	qs, err = r.ExactQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 3)
	for _, q := range qs {
		require.False(t, q.Estimated, q.Name)
	}
	require.Equal(t, counts{60, 0, 0, 4000, 0, 10}, queueCounts(queueNamed(t, qs, "a")))
	require.Equal(t, counts{4000, 0, 0, 200}, queueCounts(queueNamed(t, qs, "b")))
}

// TestCountsEstimatedWhenManyPastRetention: more finished jobs past their
// retention than the cap (no process purged them) make the finished
// states' counts estimates, though each state is within the cap; the
// exact counts leave them all out.
func TestCountsEstimatedWhenManyPastRetention(t *testing.T) {
	r, db := newRouter[int](t, countOpts("q"))
	pgrouter.SetCountCap(r, 100)
	addJobs(t, db, "q", "s", leaserouter.StateSucceeded, 60, false)
	addJobs(t, db, "q", "f", leaserouter.StateDead, 60, true)
	addJobs(t, db, "q", "c", leaserouter.StateCanceled, 60, true)
	addJobs(t, db, "q", "p", leaserouter.StatePending, 10, false)
	ctx := t.Context()
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.True(t, s.Estimated)
	require.Equal(t, 10, s.Pending)
	e, err := r.ExactStats(ctx)
	require.NoError(t, err)
	require.False(t, e.Estimated)
	require.Equal(t, counts{10, 0, 0, 60, 0, 0}, countsOf(e))
	qs, err := r.Queues(ctx)
	require.NoError(t, err)
	require.True(t, queueNamed(t, qs, "q").Estimated)
	qs, err = r.ExactQueues(ctx)
	require.NoError(t, err)
	require.Equal(t, counts{10, 0, 0, 60, 0, 0}, queueCounts(queueNamed(t, qs, "q")))
}

// TestCountsWalkTheOrderIndexAndTheLeasesInFlight: Stats' and Queues'
// statements count a state other than leased by a walk of
// leaserouter_jobs_order_unleased that stops after the cap, and the leased
// state by a walk of the queue's leases in flight (leaserouter_jobs_leased)
// that stops there too, in the plan a connection keeps (generic) and in
// the first ones (custom), on a table analyzed but never vacuumed (a walk
// reads rows then): never a scan of the table, which stops early only
// where the state's jobs lie early in it (a queue enqueued last, at the
// table's end, was read whole for each state: seconds at 10M rows).
func TestCountsWalkTheOrderIndexAndTheLeasesInFlight(t *testing.T) {
	db := pgtest.New(t)
	addJobs(t, db, "a", "as", leaserouter.StateSucceeded, 20000, false)
	addJobs(t, db, "a", "ap", leaserouter.StatePending, 5000, false)
	addJobs(t, db, "a", "al", leaserouter.StateLeased, 300, false)  // more than the cap
	addJobs(t, db, "z", "zp", leaserouter.StatePending, 300, false) // at the table's end
	addJobs(t, db, "z", "zf", leaserouter.StateDead, 300, false)
	addJobs(t, db, "z", "zl", leaserouter.StateLeased, 50, false)
	_, err := db.Exec(t.Context(), "ANALYZE leaserouter_jobs")
	require.NoError(t, err)
	const limit = 100
	for _, c := range []struct {
		stmt, queue string
		queues      int
		leased      int // the leases the walks of leaserouter_jobs_leased read
	}{{"job_stats", "a", 1, limit + 1}, {"job_stats", "z", 1, 50}, {"queues_stats", "", 2, limit + 1 + 50}} {
		for _, generic := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/%s/generic=%v", c.stmt, c.queue, generic), func(t *testing.T) {
				values := map[string]any{"queue": c.queue, "cap": int64(limit)}
				plan := explainStatement(t, db, c.stmt, generic, values)
				var out []struct{ Plan planNode }
				require.NoError(t, json.Unmarshal(plan, &out))
				for _, typ := range []string{"Seq Scan", "Bitmap Heap Scan"} {
					require.Empty(t, out[0].Plan.nodes(typ), "%s", plan)
				}
				by := out[0].Plan.readBy()
				var read float64
				for index, rows := range by {
					require.Contains(t, []string{"leaserouter_jobs_order_unleased", "leaserouter_jobs_leased",
						"leaserouter_jobs_purge", "leaserouter_jobs_pkey"}, index, "%s", plan)
					read += rows
				}
				// EXPLAIN gives rows a loop rounded: within a row a queue.
				require.InDelta(t, float64(c.leased), by["leaserouter_jobs_leased"], float64(c.queues), "the leases counted:\n%s", plan)
				require.LessOrEqual(t, int(read), c.queues*6*(limit+1)+10, "rows read:\n%s", plan)
			})
		}
	}
}

// explainStatement is EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) of
// sql/name.sql with values: its custom plan, or with generic its generic
// plan.
func explainStatement(t *testing.T, db *pgxpool.Pool, name string, generic bool, values map[string]any) []byte {
	t.Helper()
	sql, names := pgrouter.Statement(name)
	tx, err := db.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	bound := append([]any{pgx.QueryExecModeSimpleProtocol}, bindPositional(names, values)...)
	_, err = tx.Exec(t.Context(), "SET LOCAL jit = off")
	require.NoError(t, err)
	if generic {
		_, err = tx.Exec(t.Context(), "SET LOCAL plan_cache_mode = force_generic_plan")
		require.NoError(t, err)
	}
	_, err = tx.Prepare(t.Context(), "counts_"+name, sql)
	require.NoError(t, err)
	params := ""
	for i := range names {
		params += fmt.Sprintf(", $%d", i+1)
	}
	var plan []byte
	require.NoError(t, tx.QueryRow(t.Context(),
		"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE counts_"+name+"("+params[2:]+")", bound...).Scan(&plan))
	return plan
}

// batchTracer records the statements of the batches sent through a pool.
type batchTracer struct {
	mu   sync.Mutex
	sqls []string
}

func (b *batchTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (b *batchTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (b *batchTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (b *batchTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	b.mu.Lock()
	b.sqls = append(b.sqls, d.SQL)
	b.mu.Unlock()
}
func (b *batchTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestCountsTurnJITOffForTheirBatchOnly: Stats' and Queues' batches turn
// JIT compilation off before their counts (compiling a count's plan, whose
// estimated cost can pass jit_above_cost, takes hundreds of
// milliseconds), for the batch's transaction only: the pool's connection
// has JIT as it was after.
func TestCountsTurnJITOffForTheirBatchOnly(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	var tr batchTracer
	cfg.ConnConfig.Tracer = &tr
	cfg.MaxConns = 1 // the connection that ran the batch is the one read after
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close) // after the Router's Close
	r := routerOn[int](t, db, countOpts("q"))
	ctx := t.Context()
	jitOff, _ := pgrouter.Statement("jit_off")
	stats, _ := pgrouter.Statement("job_stats")
	queues, _ := pgrouter.Statement("queues_stats")
	var before string
	require.NoError(t, db.QueryRow(ctx, "SELECT current_setting('jit')").Scan(&before))
	for _, c := range []struct {
		count string
		call  func() error
	}{
		{stats, func() error { _, err := r.Stats(ctx); return err }},
		{stats, func() error { _, err := r.ExactStats(ctx); return err }},
		{queues, func() error { _, err := r.Queues(ctx); return err }},
		{queues, func() error { _, err := r.ExactQueues(ctx); return err }},
	} {
		tr.mu.Lock()
		tr.sqls = nil
		tr.mu.Unlock()
		require.NoError(t, c.call())
		tr.mu.Lock()
		sqls := tr.sqls
		tr.mu.Unlock()
		i := slices.Index(sqls, c.count) // among the maintenance loop's batches, if one ran meanwhile
		require.Positive(t, i, "the count, not first in its batch")
		require.Equal(t, jitOff, sqls[i-1])
		var after string
		require.NoError(t, db.QueryRow(ctx, "SELECT current_setting('jit')").Scan(&after))
		require.Equal(t, before, after)
	}
}

// TestEstimatedStatsSayHowOld: estimated counts carry the instant of the
// statistics they come from (the jobs table's last ANALYZE, by hand or by
// autovacuum), unknown (zero) before any; exact ones carry none.
func TestEstimatedStatsSayHowOld(t *testing.T) {
	r, db := newRouter[int](t, countOpts("q"))
	_, err := db.Exec(t.Context(), "ALTER TABLE leaserouter_jobs SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	pgrouter.SetCountCap(r, 20)
	addJobs(t, db, "q", "p", leaserouter.StatePending, 10, false)
	s, err := r.Stats(t.Context())
	require.NoError(t, err)
	require.False(t, s.Estimated)
	require.True(t, s.EstimatedAsOf.IsZero(), "exact counts: no statistics' instant")

	addJobs(t, db, "q", "c", leaserouter.StateCanceled, 50, false)
	s, err = r.Stats(t.Context())
	require.NoError(t, err)
	require.True(t, s.Estimated)
	require.True(t, s.EstimatedAsOf.IsZero(), "never analyzed: the statistics' instant is unknown")

	var before, after time.Time
	require.NoError(t, db.QueryRow(t.Context(), "SELECT clock_timestamp()").Scan(&before))
	_, err = db.Exec(t.Context(), "ANALYZE leaserouter_jobs")
	require.NoError(t, err)
	require.NoError(t, db.QueryRow(t.Context(), "SELECT clock_timestamp()").Scan(&after))
	s, err = r.Stats(t.Context())
	require.NoError(t, err)
	require.True(t, s.Estimated)
	require.False(t, s.EstimatedAsOf.Before(before), "%v before the ANALYZE at %v", s.EstimatedAsOf, before)
	require.False(t, s.EstimatedAsOf.After(after), "%v after the ANALYZE ended at %v", s.EstimatedAsOf, after)
	e, err := r.ExactStats(t.Context())
	require.NoError(t, err)
	require.False(t, e.Estimated)
	require.True(t, e.EstimatedAsOf.IsZero())
	require.Equal(t, 50, e.Canceled)
}

// TestReadyHeadReadsEachKindsHeadOnly: Stats' probe of the queue's ready
// order (ready_head) reads leaserouter_jobs_kind_ready alone, a few
// entries and buffers per kind with pending jobs, however many jobs are
// pending: 100,000 of 3 kinds (and another queue's), on a young table
// and an analyzed one, in the plan a connection keeps (generic) and the
// first ones (custom); never a scan or sort of the pending jobs, as the
// kindless index's walk of versions before 21 would become without it.
// Its answer is the head of the ready order across the kinds.
func TestReadyHeadReadsEachKindsHeadOnly(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, `ALTER TABLE leaserouter_jobs SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO leaserouter_jobs
		(queue, id, kind, state, priority, ready_at, max_attempts, payload, created_at, updated_at)
		SELECT q, q || i, (ARRAY['', 'a', 'b'])[i % 3 + 1], 'pending', i % 2,
			now() - random() * interval '1 hour', 25, '1', now(), now()
		FROM (VALUES ('default', 100000), ('other', 20000)) v(q, n), generate_series(1, n) i`)
	require.NoError(t, err)
	addJobs(t, db, "default", "s", leaserouter.StateSucceeded, 2000, false)
	addJobs(t, db, "default", "l", leaserouter.StateLeased, 2000, false)
	addJobs(t, db, "default", "f", leaserouter.StateScheduled, 2000, false)
	// The queue's head: one of two jobs (kinds a and b) at a priority no
	// other job has.
	_, err = db.Exec(ctx, `UPDATE leaserouter_jobs SET priority = 5 WHERE queue = 'default' AND id IN ('default7', 'default8')`)
	require.NoError(t, err)
	var want time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT ready_at FROM leaserouter_jobs WHERE queue = 'default' AND state = 'pending'
		ORDER BY priority DESC, ready_at, seq LIMIT 1`).Scan(&want))
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			_, err = db.Exec(ctx, `VACUUM ANALYZE leaserouter_jobs`)
			require.NoError(t, err)
		}
		for _, generic := range []bool{false, true} {
			t.Run(fmt.Sprintf("analyzed=%v/generic=%v", analyzed, generic), func(t *testing.T) {
				raw := explainStatement(t, db, "ready_head", generic, map[string]any{"queue": pgrouter.DefaultQueue})
				var out []struct{ Plan planNode }
				require.NoError(t, json.Unmarshal(raw, &out))
				plan := out[0].Plan
				for _, typ := range []string{"Seq Scan", "Bitmap Heap Scan"} {
					require.Empty(t, plan.nodes(typ), "%s", raw)
				}
				require.Zero(t, plan.count(func(p planNode) bool {
					return p.Relation == "leaserouter_jobs" && p.Index != "leaserouter_jobs_kind_ready"
				}), "a read of the jobs table by another index:\n%s", raw)
				// An entry at most per probe, 2k + 2 probes for k = 3
				// kinds: the first kind, the next above each (the last
				// finds none), each kind's head (and the end of the kinds'
				// list, which reads none; EXPLAIN rounds rows per loop up).
				read := plan.read(func(p planNode) bool { return p.Index != "" })
				require.LessOrEqual(t, read, 2*3+2, "index entries read:\n%s", raw)
				require.LessOrEqual(t, int(plan.Hit+plan.Fetched), 40, "buffers read:\n%s", raw)
			})
		}
		sql, names := pgrouter.Statement("ready_head")
		var got time.Time
		require.NoError(t, db.QueryRow(ctx, sql, bindPositional(names, map[string]any{"queue": pgrouter.DefaultQueue})...).Scan(&got))
		require.True(t, want.Equal(got), "the head of the ready order: %v, not %v", want, got)
	}
}
