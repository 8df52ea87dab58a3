package pgrouter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// drainJobs enqueues n jobs and runs them all through Run (2 workers,
// the default Batch ceiling).
func drainJobs(t *testing.T, r *pgrouter.Router[int], n int) {
	t.Helper()
	for i := 0; i < n; i += 1000 {
		enqueueJobs(t, r, "d"+strconv.Itoa(i)+"-", min(1000, n-i))
	}
	var left atomic.Int64
	left.Store(int64(n))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := r.Run(ctx, leaserouter.WorkerOptions{Workers: 2}, func(context.Context, *pgrouter.Lease[int]) error {
		if left.Add(-1) == 0 {
			cancel()
		}
		return nil
	})
	require.NoError(t, err)
	require.Zero(t, left.Load(), "jobs left undrained")
}

// readyWalkBuffers is how many buffers the walk of the ready index
// (leaserouter_jobs_kind_ready) reads to find the first pending job of
// kind "" in the default queue (a claim arm's scan, EXPLAIN (ANALYZE,
// BUFFERS): the plan's total, its first Buffers line), the walk forced
// (no sort, no bitmap).
func readyWalkBuffers(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	tx, err := db.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The claim's plan, whatever the statistics of a table this small
	// make of it (with one row, a sort of what the primary key finds).
	_, err = tx.Exec(t.Context(), `SET LOCAL enable_sort = off`)
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `SET LOCAL enable_bitmapscan = off`)
	require.NoError(t, err)
	rows, err := tx.Query(t.Context(), `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF)
		SELECT id FROM leaserouter_jobs WHERE queue = 'default' AND kind = '' AND state <= 'pending'
		ORDER BY priority DESC, ready_at, seq LIMIT 1`)
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	text := strings.Join(plan, "\n")
	require.Regexp(t, `Index Scan (using|on) leaserouter_jobs_kind_ready`, text, "the walk is the ready index's")
	m := regexp.MustCompile(`Buffers: shared hit=(\d+)(?: read=(\d+))?`).FindStringSubmatch(text)
	require.NotNil(t, m, text)
	hit, _ := strconv.Atoi(m[1])
	read, _ := strconv.Atoi(m[2])
	t.Logf("ready walk: %d buffers\n%s", hit+read, text)
	return hit + read
}

// TestDrainedQueueVacuumedSoClaimWalkStaysShort: after a burst of jobs
// drained, the Router vacuums the jobs table itself (autovacuum is off for
// the table here: it could come a minute or more later), so the claim's
// walk of the ready index no longer steps over the dead entries of the
// claimed jobs: a few buffers, not one per ~150 jobs drained.
func TestDrainedQueueVacuumedSoClaimWalkStaysShort(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{Retention: -1})
	_, err := db.Exec(t.Context(), "ALTER TABLE leaserouter_jobs SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	drainJobs(t, r, 6000) // pending, leased, succeeded, deleted: 18,000 dead tuples
	enqueueJobs(t, r, "after-", 1)
	eventually(t, 30*time.Second, "a vacuum of the jobs table by the Router", func() bool {
		var vacuumed bool
		require.NoError(t, db.QueryRow(t.Context(), `SELECT last_vacuum IS NOT NULL
			FROM pg_stat_user_tables WHERE relname = 'leaserouter_jobs'`).Scan(&vacuumed))
		return vacuumed
	})
	require.LessOrEqual(t, readyWalkBuffers(t, db), 10, "the claim's walk reads the dead entries' pages")
}

// TestGrownQueueAnalyzedSoPlansFollowItsSize: a queue grown by enqueues
// alone (no dead tuples: no vacuum is due) is analyzed by the Router
// (autovacuum, and with it autoanalyze, is off for the table here), so
// the plans each connection keeps are made again with statistics of its
// size, not of the tiny table they were first made on.
func TestGrownQueueAnalyzedSoPlansFollowItsSize(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	_, err := db.Exec(t.Context(), "ALTER TABLE leaserouter_jobs SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	for i := range 12 {
		enqueueJobs(t, r, "g"+strconv.Itoa(i)+"-", 1000)
	}
	eventually(t, 30*time.Second, "an ANALYZE of the jobs table by the Router", func() bool {
		var analyzed bool
		require.NoError(t, db.QueryRow(t.Context(), `SELECT last_analyze IS NOT NULL
			FROM pg_stat_user_tables WHERE relname = 'leaserouter_jobs'`).Scan(&analyzed))
		return analyzed
	})
	var tuples float64
	require.NoError(t, db.QueryRow(t.Context(),
		"SELECT reltuples FROM pg_class WHERE relname = 'leaserouter_jobs'").Scan(&tuples))
	require.InDelta(t, 12000, tuples, 100, "the planner's row count is the table's")
}

// vacuumCount is how many times the jobs table was vacuumed by hand (by
// the Router: autovacuum is counted apart).
func vacuumCount(t *testing.T, db *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(t.Context(), `SELECT vacuum_count
		FROM pg_stat_user_tables WHERE relname = 'leaserouter_jobs'`).Scan(&n))
	return n
}

// TestNoVacuumWhileOlderSnapshotHeld: while a transaction that began
// before the Router's last vacuum holds a snapshot, the Router does not
// vacuum again, however many tuples die (none could be removed, and each
// vacuum takes a core from the claims); once it ends, it does.
func TestNoVacuumWhileOlderSnapshotHeld(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{Retention: -1})
	_, err := db.Exec(t.Context(), "ALTER TABLE leaserouter_jobs SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	reader, err := db.Begin(t.Context())
	require.NoError(t, err)
	defer reader.Rollback(context.Background())
	_, err = reader.Exec(t.Context(), "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	_, err = reader.Exec(t.Context(), "SELECT 1 FROM leaserouter_jobs LIMIT 1")
	require.NoError(t, err)
	drainJobs(t, r, 6000)
	eventually(t, 30*time.Second, "the Router's first vacuum", func() bool { return vacuumCount(t, db) >= 1 })
	first := vacuumCount(t, db)
	drainJobs(t, r, 6000) // 18,000 more dead tuples, none removable
	// Twice the longest the Router would wait between vacuums of a table
	// this small (5s after the last, checked every second).
	for deadline := time.Now().Add(12 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		require.Equal(t, first, vacuumCount(t, db), "a vacuum while the older snapshot is held")
	}
	require.NoError(t, reader.Rollback(t.Context()))
	eventually(t, 30*time.Second, "a vacuum once the snapshot ended", func() bool { return vacuumCount(t, db) > first })
	// That vacuum removed what died while the snapshot was held: the
	// statistics it left count none dead (a vacuum under the snapshot
	// counts all 24,000). Not the walk's length, as the test above: a
	// page pinned by another statement when the vacuum reaches it keeps
	// its dead tuples (PostgreSQL's lazy_scan_noprune), and their index
	// entries, until the next.
	var dead int64
	require.NoError(t, db.QueryRow(t.Context(), `SELECT n_dead_tup
		FROM pg_stat_user_tables WHERE relname = 'leaserouter_jobs'`).Scan(&dead))
	require.Less(t, dead, int64(1000), "dead tuples left by the vacuum after the snapshot ended")
}

// deadTuples fills db's jobs table with n rows and deletes them, and
// waits until the statistics count them dead.
func deadTuples(t *testing.T, db *pgxpool.Pool, n int) {
	t.Helper()
	_, err := db.Exec(t.Context(), `ALTER TABLE leaserouter_jobs SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	_, err = db.Exec(t.Context(), `INSERT INTO leaserouter_jobs (queue, id, state, ready_at, max_attempts, payload, created_at, updated_at)
			SELECT 'default', 'x' || i, 'pending', now(), 5, '1', now(), now() FROM generate_series(1, $1) i`, n)
	require.NoError(t, err)
	_, err = db.Exec(t.Context(), `DELETE FROM leaserouter_jobs WHERE id LIKE 'x%'`)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the dead tuples counted", func() bool {
		var dead int64
		require.NoError(t, db.QueryRow(t.Context(), `SELECT n_dead_tup FROM pg_stat_user_tables
			WHERE relname = 'leaserouter_jobs'`).Scan(&dead))
		return dead >= int64(n)
	})
}

// TestVacuumOnlyByTheOwner: a Router whose role does not own the jobs
// table (nor is a member of its owner) never finds a vacuum or an
// analyze due: PostgreSQL would only warn, in the server's log, at every
// check. The owner finds both due. The role that does not own it is
// made for the test, so the test's role needs CREATEROLE: at
// LEASEROUTER_TEST_DATABASE_URL it may lack it, and the test is skipped.
func TestVacuumOnlyByTheOwner(t *testing.T) {
	_, db := newRouter[int](t, pgrouter.Options{NoVacuum: true})
	var user string
	var createRole bool
	require.NoError(t, db.QueryRow(t.Context(), `SELECT current_user, rolcreaterole OR rolsuper
		FROM pg_roles WHERE rolname = current_user`).Scan(&user, &createRole))
	if !createRole && os.Getenv(pgtest.EnvURL) != "" {
		t.Skipf("the role %s at %s may not create roles (CREATEROLE): this test makes one that does not own the jobs table", user, pgtest.EnvURL)
	}
	deadTuples(t, db, 12000)
	sql, names := pgrouter.Statement("vacuum_due")
	values := map[string]any{"min_dead": int64(10000), "min_changed": int64(10000), "interval_us": int64(5e6), "last_start": nil}
	due := func(role string) (vacuum, analyze bool) {
		tx, err := db.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		if role != "" {
			_, err = tx.Exec(t.Context(), "SET LOCAL ROLE "+role)
			require.NoError(t, err)
		}
		var now time.Time
		require.NoError(t, tx.QueryRow(t.Context(), sql, bindPositional(names, values)...).Scan(&vacuum, &analyze, &now))
		return vacuum, analyze
	}
	vacuum, analyze := due("")
	require.True(t, vacuum, "vacuum due for the owner")
	require.True(t, analyze, "analyze due for the owner")
	// Roles are the server's, not the database's: one of the test's own
	// (test processes may share the server), dropped when it ends.
	notOwner := fmt.Sprintf("leaserouter_not_owner_%08x", rand.Uint32())
	_, err := db.Exec(t.Context(), "CREATE ROLE "+notOwner)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_, err := db.Exec(ctx, "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "+notOwner)
		require.NoError(t, err)
		_, err = db.Exec(ctx, "DROP ROLE "+notOwner)
		require.NoError(t, err)
	})
	// SET ROLE takes membership (CREATEROLE alone is not, before
	// PostgreSQL 16).
	_, err = db.Exec(t.Context(), "GRANT "+notOwner+" TO CURRENT_USER")
	require.NoError(t, err)
	_, err = db.Exec(t.Context(), `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+notOwner)
	require.NoError(t, err)
	vacuum, analyze = due(notOwner)
	require.False(t, vacuum, "vacuum due for a role that cannot vacuum")
	require.False(t, analyze, "analyze due for a role that cannot analyze")
}

// TestNoVacuumLeavesTheTable: with Options.NoVacuum, the Router neither
// vacuums nor analyzes the jobs table, though both are due (a Router
// without it starts within a second or two: the tests above).
func TestNoVacuumLeavesTheTable(t *testing.T) {
	_, db := newRouter[int](t, pgrouter.Options{NoVacuum: true})
	deadTuples(t, db, 12000)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var vacuums, analyzes int64
		require.NoError(t, db.QueryRow(t.Context(), `SELECT vacuum_count, analyze_count
			FROM pg_stat_user_tables WHERE relname = 'leaserouter_jobs'`).Scan(&vacuums, &analyzes))
		require.Zero(t, vacuums, "vacuumed with NoVacuum")
		require.Zero(t, analyzes, "analyzed with NoVacuum")
	}
}
