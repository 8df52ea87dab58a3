package pgrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// The batch lease statements, with a value for each of their parameters.
var batchStatements = []string{"leases_end", "leases_end:skip", "leases_heartbeat", "leases_hand_back", "leases_hand_back:skip"}

func batchValues(ids []string, tokens []int64) map[string]any {
	return map[string]any{"ids": ids, "tokens": tokens, "queue": "default", "reason": "completed",
		"retention_us": int64(-1), "accept_ended": false, "lease_us": int64(60e6)}
}

// bindPositional binds values to a statement's parameters in order.
func bindPositional(names []string, values map[string]any) []any {
	bound := make([]any, len(names))
	for i, n := range names {
		bound[i] = values[n]
	}
	return bound
}

// youngQueue fills a fresh database's queue with n jobs, every other one
// leased (token = its number), with no statistics gathered on the table,
// as on a table created minutes ago.
func youngQueue(t testing.TB, n int) *pgxpool.Pool {
	db := pgtest.New(t)
	fillYoungQueue(t, db, n)
	return db
}

// fillYoungQueue is youngQueue's filling, of db.
func fillYoungQueue(t testing.TB, db *pgxpool.Pool, n int) {
	_, err := db.Exec(t.Context(), `ALTER TABLE leaserouter_jobs SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	_, err = db.Exec(t.Context(), `INSERT INTO leaserouter_jobs
		(queue, id, state, ready_at, max_attempts, payload, created_at, updated_at, token, lease_expires_at, attempt)
		SELECT 'default', 'j' || i, CASE WHEN i % 2 = 0 THEN 'leased' ELSE 'pending' END::leaserouter_job_state,
			now(), 25, '1', now(), now(), i, now() + interval '1 hour', 1
		FROM generate_series(1, $1) i`, n)
	require.NoError(t, err)
}

// The batch lease statements are planned once per connection, not at
// every call, whatever their arrays' lengths: after the server's five
// custom plans, its generic plan is kept (a custom plan of leases_end
// took longer to make than the statement took to run, and a batch of
// one, Run's completion at Batch 1, paid it every time).
func TestBatchStatementsPlannedOnce(t *testing.T) {
	db := youngQueue(t, 4000)
	conn, err := db.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	for _, name := range batchStatements {
		sql, names := pgrouter.Statement(name)
		for i := range 12 {
			ids := make([]string, 1+i%3) // arrays of 1, 2, 3: none a token of a valid lease
			tokens := make([]int64, len(ids))
			for k := range ids {
				ids[k], tokens[k] = fmt.Sprint("none", k), 1
			}
			rows, err := conn.Query(t.Context(), sql, bindPositional(names, batchValues(ids, tokens))...)
			require.NoError(t, err)
			rows.Close()
			require.NoError(t, rows.Err(), name)
		}
		requirePlannedOnce(t, conn, sql, name, 12)
	}
}

// requirePlannedOnce checks that statement sql (name), run calls times on
// q's session, was planned as the server plans a statement whose generic
// plan it keeps: five custom plans, then the generic one.
func requirePlannedOnce(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql, name string, calls int64) {
	t.Helper()
	var generic, custom int64
	require.NoError(t, q.QueryRow(t.Context(),
		`SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, sql).
		Scan(&generic, &custom))
	require.Equal(t, int64(5), custom, "%s: custom plans", name)
	require.Equal(t, calls-5, generic, "%s: generic plans", name)
}

// A claim is planned once per connection, whatever its size, on a table
// with statistics: after the server's five custom plans, its generic plan
// is kept. (A plan knowing @n looked far cheaper for a claim of one than
// the generic one, so Run at Batch 1 planned every claim again, ~170 us
// each, more than the claim took to run.)
func TestClaimPlannedOnce(t *testing.T) {
	db := youngQueue(t, 4000)
	_, err := db.Exec(t.Context(), `ANALYZE leaserouter_jobs`)
	require.NoError(t, err)
	conn, err := db.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	sql, names := pgrouter.Statement("claim")
	tx, err := conn.Begin(t.Context()) // rolled back: the claims lease nothing for good
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	for i := range 12 {
		values := map[string]any{"queue": "default", "n": int64(1 + i%3), "worker": "w", "lease_us": int64(60e6), "claim": int64(i + 1),
			"kind_1": ""}
		rows, err := tx.Query(t.Context(), sql, bindPositional(names, values)...)
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			n++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, 1+i%3, n, "jobs leased")
	}
	requirePlannedOnce(t, tx, sql, "claim", 12)
}

// On a young table (no statistics), a batch of k leases locks its rows
// through their keys, reading about k rows of the table, whatever else
// the queue holds: never by a scan of the queue (the join it replaced
// could). The update that follows joins by key with no predicate on the
// state; with statistics it finds its rows by key too, but with none at
// all the planner may still scan the queue for it: not asserted here.
func TestBatchStatementsLockByKey(t *testing.T) {
	const n, k = 4000, 64
	db := youngQueue(t, n)
	ids, tokens := make([]string, k), make([]int64, k)
	for i := range k {
		ids[i], tokens[i] = fmt.Sprint("j", 2*(i+1)), int64(2*(i+1)) // leased
	}
	for _, name := range batchStatements {
		t.Run(name, func(t *testing.T) {
			conn, err := db.Acquire(t.Context())
			require.NoError(t, err)
			defer conn.Release()
			sql, names := pgrouter.Statement(name)
			for range 6 { // past the custom plans: the plan kept
				_, err := conn.Exec(t.Context(), sql, bindPositional(names, batchValues([]string{"none"}, []int64{1}))...)
				require.NoError(t, err)
			}
			var stmt string
			require.NoError(t, conn.QueryRow(t.Context(),
				`SELECT name FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&stmt))
			tx, err := conn.Begin(t.Context())
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.Background()) }()
			params := ""
			for i := range names {
				params += fmt.Sprintf(", $%d", i+1)
			}
			var plan []byte
			// EXPLAIN takes no parameters: pgx writes the values in.
			explain := append([]any{pgx.QueryExecModeSimpleProtocol}, bindPositional(names, batchValues(ids, tokens))...)
			require.NoError(t, tx.QueryRow(t.Context(),
				"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "+stmt+"("+params[2:]+")", explain...).Scan(&plan))
			var out []struct{ Plan planNode }
			require.NoError(t, json.Unmarshal(plan, &out))
			read := out[0].Plan.lockedRead("leaserouter_jobs", false)
			require.LessOrEqual(t, read, k+8, "rows of the table read to lock %d leases among %d jobs:\n%s", k, n, plan)
			require.GreaterOrEqual(t, read, k, "the batch's rows were not read: the plan is not the statement's")
			require.Empty(t, out[0].Plan.functionScans(), "SQL functions run, not inlined: called once a row")
		})
	}
}

// The statements that pick rows in an index's order and then change
// them (a claim, and the maintenance loop's settling and purging) find
// the rows they change through their keys, whatever the table's size and
// statistics: they pick their rows by walking an index in its order,
// reading about as many rows as they take, and then read about as many
// rows as they change: never a scan of the queue, nor of every row a
// state holds. (Joined to the picked
// rows directly, the change hashed the whole table whenever statistics
// made k index lookups look dearer than a seq scan: a claim of 256 in a
// queue of 20,000 jobs spent 9.7 of its 13 ms so. And the purge, its
// bound on purge_at one no index could take, read every finished row of
// the queue, dead index entries included, and sorted them.)
func TestPickingStatementsFindRowsByKey(t *testing.T) {
	const n, k = 20000, 256
	db := youngQueue(t, n) // every other job leased, the rest pending
	_, err := db.Exec(t.Context(), `
		UPDATE leaserouter_jobs SET lease_expires_at = now() - interval '1 second'
			WHERE state = 'leased' AND token % 20 = 0;
		UPDATE leaserouter_jobs SET state = 'scheduled', ready_at = now() - interval '1 second'
			WHERE state = 'pending' AND substr(id, 2)::int % 20 = 1;
		UPDATE leaserouter_jobs SET state = 'succeeded', purge_at = now() - interval '1 second'
			WHERE state = 'pending' AND substr(id, 2)::int % 20 = 3;
		ANALYZE leaserouter_jobs`)
	require.NoError(t, err)
	for _, name := range []string{"claim", "settle_expired", "settle_scheduled", "purge"} {
		for _, generic := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/generic=%v", name, generic), func(t *testing.T) {
				requireReadByKey(t, explainPicking(t, db, name, generic, k), name, k, n)
			})
		}
	}
}

// On a young table (no statistics: the estimates come from its size),
// as Enqueue leaves it, a claim's kept plan finds its rows by key too.
// (With the rows estimated at 10, a bitmap scan of the whole queue
// looked cheaper for a table of 10,000 jobs: read at every claim.)
func TestClaimOnYoungTableFindsRowsByKey(t *testing.T) {
	const n, k = 10000, 256
	r, db := newRouter[int](t, pgrouter.Options{NoVacuum: true})
	_, err := db.Exec(t.Context(), "ALTER TABLE leaserouter_jobs SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	for i := range n / 1000 {
		enqueueJobs(t, r, fmt.Sprint("y", i, "-"), 1000)
	}
	for _, generic := range []bool{false, true} {
		t.Run(fmt.Sprintf("generic=%v", generic), func(t *testing.T) {
			requireReadByKey(t, explainPicking(t, db, "claim", generic, k), "claim", k, n)
		})
	}
}

// requireReadByKey checks plan (EXPLAIN (ANALYZE, FORMAT JSON) of
// statement name picking k rows among n) changed k rows, read about k
// rows to pick them and about k more to change them. The claim picks
// its rows in two steps: the walk of its kind (unlocked, about k rows),
// then a lock of each by ctid (k rows, under LockRows).
func requireReadByKey(t *testing.T, plan []byte, name string, k, n int) {
	t.Helper()
	var out []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(plan, &out))
	require.Equal(t, float64(k), out[0].Plan.changed(), "rows changed")
	picked := out[0].Plan.lockedRead("leaserouter_jobs", false)
	require.LessOrEqual(t, picked, k+16, "rows of the table read to pick %d among %d:\n%s", k, n, plan)
	read := out[0].Plan.unlockedRead("leaserouter_jobs")
	if name == "claim" {
		read -= k // the walk's
	}
	require.LessOrEqual(t, read, k+16, "rows of the table read to change the %d picked among %d:\n%s", k, n, plan)
}

// explainPicking is EXPLAIN (ANALYZE, FORMAT JSON) of the statement
// sql/name.sql picking k rows, in a transaction rolled back: its custom
// plan, or with generic its generic plan (the one a connection keeps).
func explainPicking(t *testing.T, db *pgxpool.Pool, name string, generic bool, k int) []byte {
	t.Helper()
	values := map[string]any{"queue": "default", "n": int64(k), "limit": int64(k), "worker": "w",
		"lease_us": int64(60e6), "claim": int64(1), "retention_us": int64(60e6), "kind_1": ""}
	return explainStatement(t, db, name, generic, values)
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Function string     `json:"Function Name"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Removed  float64    `json:"Rows Removed by Filter"`
	Cond     string     `json:"Index Cond"`
	Filter   string     `json:"Filter"`
	Subplan  string     `json:"Subplan Name"`
	Hit      float64    `json:"Shared Hit Blocks"`  // with BUFFERS: this node's and its children's
	Fetched  float64    `json:"Shared Read Blocks"` // with BUFFERS: read from outside the buffer cache
	Plans    []planNode `json:"Plans"`
}

// lockedRead is how many rows the scans of table under the LockRows
// nodes of n (locking: n is under one) returned or filtered out, over
// all their loops.
func (n planNode) lockedRead(table string, locking bool) int {
	locking = locking || n.Type == "LockRows"
	read := 0.0
	if locking && n.Relation == table {
		read = (n.Rows + n.Removed) * n.Loops
	}
	for _, c := range n.Plans {
		read += float64(c.lockedRead(table, locking))
	}
	return int(read)
}

// changed is how many rows the ModifyTable node in n changed.
func (n planNode) changed() float64 {
	if n.Type == "ModifyTable" {
		return n.Rows
	}
	for _, c := range n.Plans {
		if rows := c.changed(); rows > 0 {
			return rows
		}
	}
	return 0
}

// unlockedRead is how many rows the scans of table in n outside its
// LockRows nodes (those that pick the rows) returned or filtered out,
// over all their loops.
func (n planNode) unlockedRead(table string) int {
	if n.Type == "LockRows" {
		return 0
	}
	read := 0.0
	if n.Relation == table && n.Type != "ModifyTable" {
		read = (n.Rows + n.Removed) * n.Loops
	}
	for _, c := range n.Plans {
		read += float64(c.unlockedRead(table))
	}
	return int(read)
}

// functionScans lists the functions of ours n runs as Function Scans (a
// SQL function the planner inlined leaves none).
func (n planNode) functionScans() []string {
	var fs []string
	if n.Type == "Function Scan" && strings.HasPrefix(n.Function, "leaserouter_") {
		fs = append(fs, n.Function)
	}
	for _, c := range n.Plans {
		fs = append(fs, c.functionScans()...)
	}
	return fs
}

// A batch end judges each lease on the row's latest version, read under
// its lock: a heartbeat committed while the statement waited for the row
// counts, though the version the statement's snapshot sees had expired
// by then. (The join it replaced judged that version: the valid lease
// was left leased, neither ended nor refused.)
func TestBatchEndJudgesTheLockedVersion(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, `INSERT INTO leaserouter_jobs
		(queue, id, state, ready_at, max_attempts, payload, created_at, updated_at, token, lease_expires_at, attempt)
		VALUES ('default', 'j1', 'leased', now(), 25, '1', now(), now(), 1, clock_timestamp() + interval '1 hour', 1),
		       ('default', 'j2', 'leased', now(), 25, '1', now(), now(), 2, clock_timestamp() + interval '300 ms', 1)`)
	require.NoError(t, err)
	hb, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hb.Rollback(context.Background()) }()
	_, err = hb.Exec(ctx, `UPDATE leaserouter_jobs SET lease_expires_at = clock_timestamp() + interval '1 hour',
		updated_at = clock_timestamp() WHERE id = 'j2'`) // a heartbeat, not committed yet
	require.NoError(t, err)
	_, err = db.Exec(ctx, `SELECT pg_sleep(0.4)`) // on the server's clock: j2's committed version has expired
	require.NoError(t, err)

	ended := endBatchWaiting(t, db, "the batch waits for j2's row", []string{"j1", "j2"}, []int64{1, 2})
	require.NoError(t, hb.Commit(ctx))
	require.Equal(t, map[string]string{"j1": "succeeded", "j2": "succeeded"}, ended(),
		"j2's lease was valid when the batch locked its row (extended by the committed heartbeat)")
}

// A batch end judges each lease at the moment it holds the row's lock:
// one that waited for a row another transaction only locked (SELECT ...
// FOR UPDATE, no change) until after the lease's expiry refuses it, as
// a single lease's end does (TestExpiryCheckedAtTheLock). A plain UPDATE
// without the statement's own lock would not: PostgreSQL rechecks an
// UPDATE's WHERE after a wait only if the row was changed meanwhile, so
// the lease would be ended as of the clock read before the wait.
func TestBatchEndChecksExpiryAtTheLock(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, `INSERT INTO leaserouter_jobs
		(queue, id, state, ready_at, max_attempts, payload, created_at, updated_at, token, lease_expires_at, attempt)
		VALUES ('default', 'j1', 'leased', now(), 25, '1', now(), now(), 1, clock_timestamp() + interval '300 ms', 1)`)
	require.NoError(t, err)
	var expiry time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT lease_expires_at FROM leaserouter_jobs WHERE id = 'j1'`).Scan(&expiry))
	locker, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(context.Background()) }()
	_, err = locker.Exec(ctx, `SELECT FROM leaserouter_jobs WHERE id = 'j1' FOR UPDATE`)
	require.NoError(t, err)

	ended := endBatchWaiting(t, db, "the batch waits for j1's row", []string{"j1"}, []int64{1})
	awaitDBTime(t, db, expiry)
	require.NoError(t, locker.Rollback(ctx))
	require.Empty(t, ended(), "j1's lease had expired when the batch got its row")
	var state string
	require.NoError(t, db.QueryRow(ctx, `SELECT state::text FROM leaserouter_jobs WHERE id = 'j1'`).Scan(&state))
	require.Equal(t, "leased", state, "a refused end changes nothing")
}

// endBatchWaiting runs leases_end.sql for ids and their tokens on a
// connection of its own and returns once that statement waits for a row
// lock (what says which); the function returned waits for the statement
// to end and gives the state of each lease it ended, by ID.
func endBatchWaiting(t *testing.T, db *pgxpool.Pool, what string, ids []string, tokens []int64) func() map[string]string {
	ctx := t.Context()
	ended := make(chan map[string]string, 1)
	failed := make(chan error, 1)
	sql, names := pgrouter.Statement("leases_end")
	go func() {
		rows, err := db.Query(ctx, sql, bindPositional(names, batchValues(ids, tokens))...)
		if err != nil {
			failed <- err
			return
		}
		got := map[string]string{}
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				failed <- err
				return
			}
			got[v[0].(string)] = v[2].(string)
		}
		if err := rows.Err(); err != nil {
			failed <- err
			return
		}
		ended <- got
	}()
	eventually(t, 10*time.Second, what, func() bool {
		var waiting bool
		err := db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting)
		return err == nil && waiting
	})
	return func() map[string]string {
		select {
		case err := <-failed:
			require.NoError(t, err)
			return nil
		case got := <-ended:
			return got
		}
	}
}

// BenchmarkEndOneLease: the statement cost of ending one lease (a
// Complete), by the single-lease statement (lease_end.sql, as Complete,
// Fail and Release run it) and by the batch statement with arrays of one
// (leases_end.sql), on one connection with their kept plans, in a queue
// of 20,000 jobs. Each iteration leases the row again and rolls back, so
// no commit is timed. Measured: leases_end with arrays of one took 11%
// longer than lease_end (374 against 337 us, BEGIN and ROLLBACK
// included), and 2.5 times as long before leases_end kept one plan per
// connection: why a single lease's end has a statement of its own.
func BenchmarkEndOneLease(b *testing.B) {
	db := youngQueue(b, 20000)
	_, err := db.Exec(b.Context(), `ANALYZE leaserouter_jobs`)
	require.NoError(b, err)
	values := map[string]any{"queue": "default", "id": "j2", "token": int64(2), "reason": "completed",
		"permanent": false, "delay_us": int64(0), "error": nil, "retention_us": int64(-1), "op": int64(0),
		"ids": []string{"j2"}, "tokens": []int64{2}, "accept_ended": false}
	for _, name := range []string{"lease_end", "leases_end"} {
		b.Run(name, func(b *testing.B) {
			conn, err := db.Acquire(b.Context())
			require.NoError(b, err)
			defer conn.Release()
			sql, names := pgrouter.Statement(name)
			bound := bindPositional(names, values)
			for b.Loop() {
				tx, err := conn.Begin(b.Context())
				require.NoError(b, err)
				var n int
				rows, err := tx.Query(b.Context(), sql, bound...)
				require.NoError(b, err)
				for rows.Next() {
					n++
				}
				require.NoError(b, rows.Err())
				require.Equal(b, 1, n)
				require.NoError(b, tx.Rollback(b.Context()))
			}
		})
	}
}
