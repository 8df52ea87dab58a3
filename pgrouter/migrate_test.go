package pgrouter_test

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// toSchemaV2 takes a migrated database back to schema version 2 (states
// as smallint, leaserouter.State's values; no SQL functions), as a
// database migrated by an older pgrouter is.
func toSchemaV2(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	_, err := db.Exec(t.Context(), `DROP TRIGGER leaserouter_jobs_kind_reset ON leaserouter_jobs;
		DROP FUNCTION leaserouter_jobs_kind_reset;
		ALTER TABLE leaserouter_jobs DROP COLUMN kind, DROP COLUMN metadata, DROP COLUMN kind_of;
		DROP STATISTICS leaserouter_jobs_queue_state; DROP FUNCTION leaserouter_count_estimate;
		DROP TABLE leaserouter_queues; DROP TABLE leaserouter_history; DROP INDEX leaserouter_jobs_order_unleased;
		ALTER TABLE leaserouter_jobs DROP COLUMN leased_at; ALTER TABLE leaserouter_jobs DROP COLUMN timeout_us;
		ALTER TABLE leaserouter_jobs DROP COLUMN timeout_of;
		DROP FUNCTION leaserouter_end_lease; DROP FUNCTION leaserouter_lease_valid;
		DROP FUNCTION leaserouter_past_retention; DROP FUNCTION leaserouter_hand_back;
		DROP INDEX IF EXISTS leaserouter_jobs_ready; DROP INDEX leaserouter_jobs_scheduled;
		DROP INDEX leaserouter_jobs_leased; DROP INDEX leaserouter_jobs_purge;
		DROP INDEX leaserouter_jobs_id_unleased; DROP INDEX leaserouter_jobs_leased_seq;
		ALTER TABLE leaserouter_jobs ALTER COLUMN state TYPE smallint
			USING array_position(enum_range(NULL::leaserouter_job_state), state) - 1;
		DROP TYPE leaserouter_job_state;
		CREATE INDEX leaserouter_jobs_ready ON leaserouter_jobs (queue, priority DESC, ready_at, seq) WHERE state = 0;
		CREATE INDEX leaserouter_jobs_scheduled ON leaserouter_jobs (queue, ready_at) WHERE state = 1;
		CREATE INDEX leaserouter_jobs_leased ON leaserouter_jobs (queue, lease_expires_at) WHERE state = 2;
		CREATE INDEX leaserouter_jobs_purge ON leaserouter_jobs (queue, purge_at) WHERE state >= 3;
		DELETE FROM leaserouter_migrations WHERE version > 2`)
	require.NoError(t, err)
}

// toSchemaV1 takes a migrated database back to schema version 1 (before
// the claim id), as a database migrated by an older pgrouter is.
func toSchemaV1(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	toSchemaV2(t, db)
	_, err := db.Exec(t.Context(), `ALTER TABLE leaserouter_jobs DROP COLUMN claim;
		DROP TABLE leaserouter_abandoned_claims; DELETE FROM leaserouter_migrations WHERE version > 1`)
	require.NoError(t, err)
}

// TestNewRefusesOldSchema: New refuses a database whose schema is older
// than the module's latest migration (or missing), with an error wrapping
// ErrSchemaOutdated that names the versions, rather than a Router whose
// every claim fails; after Migrate it works; a newer schema (a newer
// pgrouter's) is accepted.
func TestNewRefusesOldSchema(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	toSchemaV1(t, db)
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{})
	if err == nil {
		_ = r.Close(ctx)
	}
	require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated, "New on a schema at version 1")
	require.ErrorContains(t, err, "at version 1,")
	require.NoError(t, pgrouter.Migrate(ctx, db))
	toSchemaV2(t, db)
	_, err = pgrouter.New[int](ctx, db, pgrouter.Options{})
	require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated, "New on a schema at version 2")
	require.ErrorContains(t, err, fmt.Sprintf("at version 2, this module needs %d", latestMigration(t)))

	require.NoError(t, pgrouter.Migrate(ctx, db))
	r = routerOn[int](t, db, pgrouter.Options{})
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err, "a claim on the migrated schema")
	require.NoError(t, l.Complete(ctx))

	_, err = db.Exec(ctx, "INSERT INTO leaserouter_migrations (version, name) VALUES (1000, 'newer')")
	require.NoError(t, err)
	routerOn[int](t, db, pgrouter.Options{}) // accepted

	_, err = db.Exec(ctx, "DROP TABLE leaserouter_migrations")
	require.NoError(t, err)
	_, err = pgrouter.New[int](ctx, db, pgrouter.Options{})
	require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated, "New on a database Migrate never ran on")
	require.ErrorContains(t, err, "at version 0,")
}

// TestMigrateDoesNotStallTheQueue: Migrate of a v2 database (0003 rewrites
// the jobs table) while a transaction holds a row of the jobs table (as a
// holder's work after CompleteTx does) does not hold up the other
// statements on the table: it waits for the table in short tries
// (lock_timeout), so another job's updates (the statements of the
// version the database is at: this module's need version 3) go through
// meanwhile, each well within a lease; once the transaction commits,
// Migrate completes the migration and a Router works on it.
func TestMigrateDoesNotStallTheQueue(t *testing.T) {
	const lease = 2 * time.Second
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: lease})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	require.NoError(t, r.Enqueue(ctx, "b", 2))
	toSchemaV2(t, db)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "UPDATE leaserouter_jobs SET state = 3, purge_at = clock_timestamp() + interval '1 hour' WHERE id = 'a'") // long work follows in tx
	require.NoError(t, err)
	migrated := make(chan error, 1)
	go func() { migrated <- pgrouter.Migrate(ctx, db) }()
	eventually(t, 10*time.Second, "Migrate waiting for the jobs table", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%leaserouter_jobs%' AND query LIKE '%DROP INDEX%'`).Scan(&n))
		return n > 0
	})
	// A v2 process's heartbeats on b for a while: each returns well within
	// the lease (a bound far above a round trip plus Migrate's 100ms lock
	// wait).
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for start := time.Now(); time.Since(start) < lease; <-tick.C {
		hctx, cancel := context.WithTimeout(ctx, lease/2)
		_, err := db.Exec(hctx, "UPDATE leaserouter_jobs SET updated_at = clock_timestamp() WHERE id = 'b' AND state = 0")
		cancel()
		require.NoError(t, err, "another job's update while Migrate waits for the holder's transaction")
	}
	select {
	case err := <-migrated:
		t.Fatalf("Migrate returned while the holder's transaction was open: %v", err)
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-migrated, "Migrate, once the transaction is over")
	var v int
	require.NoError(t, db.QueryRow(ctx, "SELECT max(version) FROM leaserouter_migrations").Scan(&v))
	require.Equal(t, latestMigration(t), v)
	r2 := routerOn[int](t, db, pgrouter.Options{LeaseDuration: lease})
	j, _, err := r2.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State, "the holder's write, converted")
	l, err := r2.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "b", l.JobID)
	require.NoError(t, l.Complete(ctx))
}

// TestStateEnumIsState pins the state column's enum (migration 0003)
// against leaserouter.State: the same names, in the same order (so
// comparisons of states in SQL follow the core's order), but the label
// 'failed' for StateDead (named "dead"): the database keeps its label.
func TestStateEnumIsState(t *testing.T) {
	db := pgtest.New(t)
	var labels []string
	require.NoError(t, db.QueryRow(t.Context(),
		"SELECT enum_range(NULL::leaserouter_job_state)::text[]").Scan(&labels))
	var want []string
	for s := leaserouter.StatePending; s <= leaserouter.StateCanceled; s++ {
		want = append(want, s.String())
	}
	want[leaserouter.StateDead] = "failed"
	require.Equal(t, want, labels)
	for s := leaserouter.StatePending; s <= leaserouter.StateCanceled; s++ {
		require.Equal(t, want[s], pgrouter.StateLabel(s), "the label pgrouter writes for %s", s)
	}
	require.Equal(t, "State(6)", (leaserouter.StateCanceled + 1).String(), "a state the enum lacks")
}

// TestMigrateConvertsStates: migration 0003 converts a v2 table with a
// job in every state (smallint, leaserouter.State's values) to the enum,
// each to its own state, and a Router of this version reads them so and
// works on them (the partial indexes made again: the pending job is
// claimed, the leased one settled at its expiry).
func TestMigrateConvertsStates(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	toSchemaV2(t, db)
	for s := leaserouter.StatePending; s <= leaserouter.StateCanceled; s++ {
		_, err := db.Exec(ctx, `INSERT INTO leaserouter_jobs (queue, id, state, ready_at, max_attempts, payload,
				created_at, updated_at, token, attempt, lease_expires_at, purge_at, ended)
			VALUES ('default', $1, $2::smallint, clock_timestamp() + CASE WHEN $2::smallint = 1 THEN interval '1 hour' ELSE interval '0' END,
				5, '7', clock_timestamp(), clock_timestamp(), CASE WHEN $2::smallint = 2 THEN 42 ELSE 0 END,
				CASE WHEN $2::smallint = 2 THEN 1 ELSE 0 END,
				CASE WHEN $2::smallint = 2 THEN clock_timestamp() + interval '200 milliseconds' END,
				CASE WHEN $2::smallint >= 3 THEN clock_timestamp() + interval '1 hour' END, '')`,
			s.String(), int16(s))
		require.NoError(t, err)
	}
	require.NoError(t, pgrouter.Migrate(ctx, db))
	for s := leaserouter.StatePending; s <= leaserouter.StateCanceled; s++ {
		var label string
		require.NoError(t, db.QueryRow(ctx, "SELECT state::text FROM leaserouter_jobs WHERE id = $1", s.String()).Scan(&label))
		require.Equal(t, pgrouter.StateLabel(s), label)
	}
	r := routerOn[int](t, db, pgrouter.Options{})
	for s := leaserouter.StatePending; s <= leaserouter.StateCanceled; s++ {
		if s == leaserouter.StateLeased {
			continue // Get would settle it once expired
		}
		j, ok, err := r.Get(ctx, s.String())
		require.NoError(t, err)
		require.True(t, ok, "job %s", s)
		require.Equal(t, s, j.State, "job %s", s)
	}
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "pending", l.JobID, "the pending job, through the ready index's new predicate")
	require.NoError(t, l.Complete(ctx))
	eventually(t, 10*time.Second, "the leased job settled at its expiry", func() bool {
		j, _, err := r.Get(ctx, "leased")
		require.NoError(t, err)
		return j.State == leaserouter.StatePending
	})
}

// TestMigrateHonoursCtxWhileWaiting: a Migrate waiting for a table an
// open transaction holds returns once its ctx ends, wrapping ctx.Err(),
// and changes nothing.
func TestMigrateHonoursCtxWhileWaiting(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	toSchemaV1(t, db)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT count(*) FROM leaserouter_jobs")
	require.NoError(t, err)
	mctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	err = pgrouter.Migrate(mctx, db)
	late := time.Since(deadlineOf(mctx))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, late, time.Second, "Migrate returns soon after its ctx's end")
	var v int
	require.NoError(t, db.QueryRow(ctx, "SELECT max(version) FROM leaserouter_migrations").Scan(&v))
	require.Equal(t, 1, v, "nothing changed")
}

// latestMigration is the version of the last migration embedded (the
// file names' numbers).
func latestMigration(t *testing.T) int {
	t.Helper()
	files := upMigrationFiles(t)
	require.NotEmpty(t, files)
	v, err := strconv.Atoi(strings.SplitN(filepath.Base(files[len(files)-1]), "_", 2)[0])
	require.NoError(t, err)
	return v
}

// TestMigrateConcurrent: Migrate is idempotent and safe when many
// processes (here, connections) run it at once.
func TestMigrateConcurrent(t *testing.T) {
	db := pgtest.New(t) // migrated once already
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pgrouter.Migrate(t.Context(), db) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var n, v int
	require.NoError(t, db.QueryRow(t.Context(), "SELECT count(*), max(version) FROM leaserouter_migrations").Scan(&n, &v))
	require.Equal(t, len(upMigrationFiles(t)), n) // the migrations embedded, each applied once
	require.Equal(t, latestMigration(t), v)
}

// A database an older pgrouter migrated to version 4 (before the
// hand-back rule was a function) is refused by New until Migrate brings
// it to version 5, after which the hand-back statements run on it.
func TestMigrateAddsHandBack(t *testing.T) {
	db := pgtest.New(t)
	_, err := db.Exec(t.Context(), `DROP FUNCTION leaserouter_hand_back; DELETE FROM leaserouter_migrations WHERE version > 4`)
	require.NoError(t, err)
	_, err = pgrouter.New[string](t.Context(), db, pgrouter.Options{})
	require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated)
	require.NoError(t, pgrouter.Migrate(t.Context(), db))
	r := routerOn[string](t, db, pgrouter.Options{})
	require.NotNil(t, r)
	for _, name := range []string{"leases_hand_back", "claim_hand_back"} {
		sql, names := pgrouter.Statement(name)
		_, err = db.Exec(t.Context(), sql, bindPositional(names, map[string]any{"ids": []string{"j1"}, "tokens": []int64{1},
			"queue": "default", "claim": int64(1)})...)
		require.NoError(t, err, name)
	}
}

// TestMigrateAppliesAMissingVersion: a database that records 24 but not
// 23 gets leaserouter_jobs_id_unleased from Migrate (it applied only
// versions above the highest recorded), and New refuses it until then.
func TestMigrateAppliesAMissingVersion(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, "DROP INDEX leaserouter_jobs_id_unleased")
	require.NoError(t, err)
	_, err = db.Exec(ctx, "DELETE FROM leaserouter_migrations WHERE version = 23")
	require.NoError(t, err)
	_, err = pgrouter.New[int](ctx, db, pgrouter.Options{})
	require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated)
	require.NoError(t, pgrouter.Migrate(ctx, db))
	requireIndexBuilt(t, db)
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{})
	require.NoError(t, err)
	require.NoError(t, r.Close(ctx))
}

// TestMigrateRefusesAMissingFirstVersion: a database that records later
// versions but not one of the first three, which cannot be applied over
// them, gets an error from Migrate, and its schema is left as it was.
func TestMigrateRefusesAMissingFirstVersion(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, "DELETE FROM leaserouter_migrations WHERE version = 2")
	require.NoError(t, err)
	err = pgrouter.Migrate(ctx, db)
	require.ErrorContains(t, err, "but not 2")
	var n int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_migrations").Scan(&n))
	require.Equal(t, len(upMigrationFiles(t))-1, n, "every version but 2 still recorded")
}

// TestMigrateCanceledReleasesItsLocks: a Migrate whose ctx ends while its
// build waits leaves no session holding Migrate's advisory locks (a
// server backend going on with the build after the client gave up would
// keep the next Migrate waiting instead of dropping the INVALID index and
// building again).
func TestMigrateCanceledReleasesItsLocks(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	asVersion10(t, db)
	snap := openSnapshot(t, db)
	defer func() { _ = snap.Rollback(context.Background()) }()
	mctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	require.Error(t, pgrouter.Migrate(mctx, db))
	time.Sleep(time.Second)
	var holders []string
	require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(array_agg(a.state || ': ' || left(a.query, 60)), '{}') FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE l.locktype = 'advisory' AND l.granted AND (l.classid::bigint << 32 | l.objid::bigint) IN ($1, $2)`, migrateXactLock, migrateSessionLock).Scan(&holders))
	require.Empty(t, holders, "sessions still holding Migrate's advisory lock 1s after Migrate returned")
}

// upMigrationFiles are the up migrations' files (migrations/NNNN_name.sql,
// not their .down.sql), in version order.
// migrationVersions are the versions of the migrations in
// migrations/, in order (a version number may be skipped).
func migrationVersions(t *testing.T) []int {
	t.Helper()
	var versions []int
	for _, f := range upMigrationFiles(t) {
		v, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
		require.NoError(t, err)
		versions = append(versions, v)
	}
	slices.Sort(versions)
	return versions
}

func upMigrationFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("migrations/*.sql")
	require.NoError(t, err)
	return slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, ".down.sql") })
}

// TestMigrateUpAfterAnInterruptedDownRestoresTheSchema: a down migration
// whose concurrent index step is interrupted (here: its ctx ends while a
// snapshot holds the drop back) leaves its version unrecorded, so the
// next Migrate up applies it again and the schema is the latest one's,
// not a half-undone version counted as applied.
func TestMigrateUpAfterAnInterruptedDownRestoresTheSchema(t *testing.T) {
	nowhere, db := schemaDB(t, "dn")
	ctx := t.Context()
	want := catalogOf(t, db, "dn")
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(ctx, "SELECT count(*) FROM dn.leaserouter_fences") // holds a snapshot: a concurrent index step waits for it
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	err = pgrouter.MigrateTo(short, nowhere, pgrouter.MigrateOptions{Schema: "dn", Version: 16, Down: true})
	cancel()
	require.Error(t, err, "the down migration interrupted")
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "dn"}))
	require.Equal(t, want, catalogOf(t, db, "dn"), "Migrate after an interrupted down")
}

// TestMigrateSetsFillfactorFiftyButKeepsOneSetByHand: version 22 fills
// the jobs table's pages to half (fillfactor 50, 85 before), and its down
// sets 85 again; a fillfactor an operator set by hand before it stays,
// up and down, in a schema whose name needs quoting too.
func TestMigrateSetsFillfactorFiftyButKeepsOneSetByHand(t *testing.T) {
	nowhere, db := schemaDB(t)
	ctx := t.Context()
	fillfactor := func(schema string) string {
		var opts []string
		require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = 'leaserouter_jobs'`, schema).Scan(&opts))
		for _, o := range opts {
			if v, ok := strings.CutPrefix(o, "fillfactor="); ok {
				return v
			}
		}
		return ""
	}
	for _, c := range []struct{ schema, byHand, want string }{{"fresh", "", "50"}, {"Tuned jobs", "70", "70"}} {
		_, err := db.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{c.schema}.Sanitize())
		require.NoError(t, err)
		require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: c.schema, Version: 21}))
		require.Equal(t, "85", fillfactor(c.schema), "version 1's")
		if c.byHand != "" {
			_, err = db.Exec(ctx, "ALTER TABLE "+pgx.Identifier{c.schema, "leaserouter_jobs"}.Sanitize()+" SET (fillfactor = "+c.byHand+")")
			require.NoError(t, err)
		}
		require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: c.schema, Version: 22}))
		require.Equal(t, c.want, fillfactor(c.schema), "%s after version 22", c.schema)
		require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: c.schema, Version: 21, Down: true}))
		require.Equal(t, cmp.Or(c.byHand, "85"), fillfactor(c.schema), "%s after version 22's down", c.schema)
	}
}
