package pgrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestEnqueueManyOverlappingBatches: concurrent batches sharing IDs, in
// opposite orders, never deadlock; each ID is enqueued once.
func TestEnqueueManyOverlappingBatches(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	ids := make([]leaserouter.JobSpec[int], 300)
	for i := range ids {
		ids[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i)}
	}
	rev := make([]leaserouter.JobSpec[int], len(ids))
	for i := range ids {
		rev[i] = ids[len(ids)-1-i]
	}
	var wg sync.WaitGroup
	errs := make([]error, 12)
	dups := make([]int, 12)
	for g := range errs {
		wg.Go(func() {
			batch := ids
			if g%2 == 1 {
				batch = rev
			}
			d, err := r.EnqueueMany(ctx, batch)
			errs[g], dups[g] = err, len(d)
		})
	}
	wg.Wait()
	total := 0
	for g := range errs {
		require.NoError(t, errs[g])
		total += len(ids) - dups[g]
	}
	require.Equal(t, len(ids), total, "each ID enqueued once")
}

// TestEnqueueOnThePoolInsertsPlainly: an enqueue on the Router's own pool
// inserts without ON CONFLICT, so the server logs no speculative-insertion
// confirmation (Heap/HEAP_CONFIRM, 48 bytes of WAL) a job, known IDs
// included (left out as duplicates); a batch naming a finished job past
// its retention is inserted with ON CONFLICT (each new job confirmed) and
// replaces it; in a caller's transaction every insert is (a failed plain
// one would abort it). Counted with pg_walinspect, the jobs table's
// records only.
func TestEnqueueOnThePoolInsertsPlainly(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{PollInterval: time.Hour}) // no purge during the test
	ctx := t.Context()
	if _, err := db.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect"); err != nil {
		if os.Getenv(pgtest.EnvRequire) == "1" {
			t.Fatalf("pg_walinspect (PostgreSQL 15 or later, a superuser): %v", err)
		}
		t.Skipf("pg_walinspect (PostgreSQL 15 or later, a superuser): %v", err)
	}
	purged := make(chan leaserouter.Event, 10) // events are delivered on a goroutine of their own
	r2 := routerOn[int](t, db, pgrouter.Options{PollInterval: time.Hour, OnEvent: func(e leaserouter.Event) {
		if e.Kind == leaserouter.EventPurged {
			purged <- e
		}
	}})
	many := func(r *pgrouter.Router[int], ids ...string) []int {
		jobs := make([]leaserouter.JobSpec[int], len(ids))
		for i, id := range ids {
			jobs[i] = leaserouter.JobSpec[int]{ID: id}
		}
		d, err := r.EnqueueMany(ctx, jobs)
		require.NoError(t, err)
		return d
	}
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprint("p", i)
	}

	require.Zero(t, confirmations(t, db, func() { require.Empty(t, many(r, ids...)) }), "new IDs on the pool: a plain insert")
	require.Zero(t, confirmations(t, db, func() {
		require.Equal(t, []int{1}, many(r, "q1", "p1", "q2"))
		require.ErrorIs(t, r.Enqueue(ctx, "p2", 0), leaserouter.ErrDuplicate)
	}), "known IDs: duplicates, and still a plain insert")

	_, err := db.Exec(ctx, `UPDATE leaserouter_jobs SET state = 'succeeded', token = 41, attempt = 3,
		purge_at = now() - interval '1 second' WHERE id = 'p3'`)
	require.NoError(t, err)
	require.Equal(t, 2, confirmations(t, db, func() { require.Empty(t, many(r2, "q3", "p3", "q4")) }),
		"a batch replacing a job past its retention: ON CONFLICT, each new job confirmed (p3's row updated)")
	var e leaserouter.Event
	select {
	case e = <-purged:
	case <-time.After(10 * time.Second):
		t.Fatal("no EventPurged for the replaced job within 10s")
	}
	require.Equal(t, "p3", e.JobID)
	require.EqualValues(t, 41, e.Token, "the replaced job's token")
	require.Equal(t, 3, e.Attempt)
	j, ok, err := r.Get(ctx, "p3")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StatePending, j.State, "p3 is the new job")

	require.Equal(t, 1, confirmations(t, db, func() {
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, r.EnqueueTx(ctx, tx, "in-tx", 0))
		require.ErrorIs(t, r.EnqueueTx(ctx, tx, "p4", 0), leaserouter.ErrDuplicate)
		require.NoError(t, tx.Commit(ctx), "the duplicate left the transaction usable")
	}), "in a caller's transaction: ON CONFLICT")
	st, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 100+2+1, st.Enqueued)
	require.EqualValues(t, 3, st.Duplicates)
}

// TestEnqueueRacingAnInsertOfItsIDIsADuplicate: an Enqueue whose plain
// insert waits for another transaction's insert of the same ID, which
// then commits, fails with a unique violation and is decided again with
// ON CONFLICT: ErrDuplicate, as an enqueue of a known ID, not an error.
func TestEnqueueRacingAnInsertOfItsIDIsADuplicate(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, r.EnqueueTx(ctx, tx, "race", 1))
	done := make(chan error, 1)
	go func() { done <- r.Enqueue(ctx, "race", 2) }()
	eventually(t, 10*time.Second, "the Enqueue waiting for the transaction's row", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'transactionid'
				AND query LIKE '-- Inserts the jobs%'`).Scan(&n)) // the text as far as the server keeps it (1 kB)
		return n > 0
	})
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-done:
		require.ErrorIs(t, err, leaserouter.ErrDuplicate)
	case <-time.After(10 * time.Second):
		t.Fatal("the Enqueue did not return within 10s of the commit")
	}
	j, ok, err := r.Get(ctx, "race")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, j.Payload, "the transaction's job")
}

// confirmations runs f and returns how many speculative insertions into
// the jobs table of db the server confirmed meanwhile (pg_walinspect's
// HEAP_CONFIRM records of that table; tests of other packages may share
// the server).
func confirmations(t *testing.T, db *pgxpool.Pool, f func()) int {
	t.Helper()
	ctx := context.Background()
	var a, b string
	require.NoError(t, db.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&a))
	f()
	require.NoError(t, db.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&b))
	eventually(t, time.Minute, "the WAL flushed up to "+b, func() bool { // read only once flushed
		var flushed bool
		require.NoError(t, db.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn", b).Scan(&flushed))
		return flushed
	})
	var c int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
		WHERE resource_manager = 'Heap' AND record_type = 'HEAP_CONFIRM'
			AND block_ref LIKE '% rel %/' || (SELECT oid FROM pg_database WHERE datname = current_database())
				|| '/' || pg_relation_filenode('leaserouter_jobs') || ' %'`, a, b).Scan(&c))
	return c
}

// TestEnqueueReadsOnlyTheRowsItReplaces: an enqueue reads the rows of the
// finished jobs it replaces, by primary key, and no others, and the plain
// insert looks each new ID up by key; on a young table (no statistics, as
// a new queue's), in both plans. (The statement
// before read the old rows through a join the planner was free to turn
// into a read of every finished job of the queue: 5,000 rows here for
// the one it replaced.)
func TestEnqueueReadsOnlyTheRowsItReplaces(t *testing.T) {
	const finished, n = 5000, 1000
	db := pgtest.New(t)
	_, err := db.Exec(t.Context(), `ALTER TABLE leaserouter_jobs SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	_, err = db.Exec(t.Context(), `INSERT INTO leaserouter_jobs (queue, id, state, ready_at, max_attempts, payload, created_at, updated_at, token, attempt, purge_at)
		SELECT 'default', 'f' || i, 'succeeded', now(), 25, '1', now(), now(), i, 1, now() - interval '1 second'
		FROM generate_series(1, $1) i`, finished)
	require.NoError(t, err)
	ids := []string{"f7"} // finished and past its retention: replaced
	for i := range n {
		ids = append(ids, fmt.Sprint("new", i))
	}
	k := len(ids)
	values := map[string]any{"queue": "default", "channel": "leaserouter", "ids": ids, "priorities": make([]int64, k),
		"max_attempts": slices.Repeat([]int32{25}, k), "payloads": slices.Repeat([]string{"1"}, k),
		"run_at": make([]*time.Time, k), "delay_us": make([]int64, k), "timeout_us": make([]int64, k),
		"kind": "", "metadata": make([]*string, k)}
	for _, generic := range []bool{false, true} {
		t.Run(fmt.Sprintf("generic=%v", generic), func(t *testing.T) {
			plan := explainStatement(t, db, "jobs_insert", generic, values)
			var out []struct{ Plan planNode }
			require.NoError(t, json.Unmarshal(plan, &out))
			require.Equal(t, float64(k), out[0].Plan.changed(), "rows inserted or replaced")
			require.LessOrEqual(t, out[0].Plan.unlockedRead("leaserouter_jobs"), 1,
				"rows read besides the insert's own (the replaced row's, by key):\n%s", plan)
		})
		// The plain insert of the new jobs alone: a lookup of each ID by
		// key (none found), no read of the finished jobs.
		t.Run(fmt.Sprintf("plain/generic=%v", generic), func(t *testing.T) {
			fresh := maps.Clone(values)
			for _, c := range []string{"ids", "priorities", "max_attempts", "payloads", "run_at", "delay_us", "timeout_us", "metadata"} {
				fresh[c] = reflect.ValueOf(values[c]).Slice(1, k).Interface()
			}
			plan := explainStatement(t, db, "jobs_insert_new", generic, fresh)
			var out []struct{ Plan planNode }
			require.NoError(t, json.Unmarshal(plan, &out))
			require.Equal(t, float64(n), out[0].Plan.changed(), "rows inserted")
			require.LessOrEqual(t, out[0].Plan.unlockedRead("leaserouter_jobs"), 1, "rows read:\n%s", plan)
		})
	}
}

// The enqueue statements are planned once per connection, whatever their
// batch's length: after the server's five custom plans, its generic plan
// is kept. (With the arrays visible to the planner, a plan knowing a
// batch of one looked far cheaper than the generic one, so each Enqueue
// was planned again: 1.2 ms a call against 0.6.)
func TestEnqueuePlannedOnce(t *testing.T) {
	db := youngQueue(t, 4000)
	conn, err := db.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	for _, name := range []string{"jobs_insert_new", "jobs_insert"} {
		sql, names := pgrouter.Statement(name)
		for i := range 12 {
			ids := make([]string, 1+i%3) // batches of 1, 2, 3 new jobs
			for k := range ids {
				ids[k] = fmt.Sprint(name, "-", i, "-", k)
			}
			n := len(ids)
			values := map[string]any{"queue": "default", "channel": "leaserouter", "ids": ids, "priorities": make([]int64, n),
				"max_attempts": slices.Repeat([]int32{25}, n), "payloads": slices.Repeat([]string{"1"}, n),
				"run_at": make([]*time.Time, n), "delay_us": make([]int64, n), "timeout_us": make([]int64, n),
				"kind": "", "metadata": make([]*string, n)}
			rows, err := conn.Query(t.Context(), sql, bindPositional(names, values)...)
			require.NoError(t, err)
			rows.Close()
			require.NoError(t, rows.Err(), name)
		}
		requirePlannedOnce(t, conn, sql, name, 12)
	}
}
