package pgrouter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// asVersion10 makes db's schema as version 10 left it as far as Migrate
// can tell: no index by ID (version 11's, or versions 23's, 24's and 28's that
// replaced it), migrations 11 and later not recorded (those after 11 are
// written to run again harmlessly).
func asVersion10(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	_, err := db.Exec(t.Context(), "DROP INDEX IF EXISTS leaserouter_jobs_id, leaserouter_jobs_id_unleased, leaserouter_jobs_id_leased, leaserouter_jobs_leased_seq")
	require.NoError(t, err)
	_, err = db.Exec(t.Context(), "DELETE FROM leaserouter_migrations WHERE version >= 11")
	require.NoError(t, err)
}

// requireIndexBuilt: the indexes by ID are as the latest version leaves
// them, valid, with ID in byte order (leaserouter_jobs_id_unleased and
// leaserouter_jobs_leased_seq; version 11's leaserouter_jobs_id and
// version 24's leaserouter_jobs_id_leased dropped), and migrations 11,
// 23, 24, 25, 28 and 29 are recorded.
func requireIndexBuilt(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	for index, want := range map[string]string{
		"leaserouter_jobs_id_unleased": `(queue, state, id COLLATE "C") INCLUDE (seq, purge_at) WHERE (state <> 'leased'::leaserouter_job_state)`,
		"leaserouter_jobs_leased_seq":  `(queue, seq, id COLLATE "C") WHERE (state = 'leased'::leaserouter_job_state)`,
	} {
		var valid bool
		var def string
		require.NoError(t, db.QueryRow(t.Context(), `SELECT indisvalid, pg_get_indexdef(indexrelid) FROM pg_index WHERE indexrelid = $1::regclass`, index).Scan(&valid, &def))
		require.True(t, valid, "%s is INVALID", index)
		require.Contains(t, def, want)
	}
	for _, index := range []string{"leaserouter_jobs_id", "leaserouter_jobs_id_leased"} {
		var gone *string
		require.NoError(t, db.QueryRow(t.Context(), "SELECT to_regclass($1)::text", index).Scan(&gone))
		require.Nil(t, gone, "%s left", index)
	}
	var n int
	require.NoError(t, db.QueryRow(t.Context(), "SELECT count(*) FROM leaserouter_migrations WHERE version IN (11, 23, 24, 25, 28, 29)").Scan(&n))
	require.Equal(t, 6, n)
}

// TestMigrateHoldsWritesAtMostALockTimeout: Migrate holds up other
// statements at most its lock timeout (100ms), index builds included:
// migration 11 builds leaserouter_jobs_id concurrently, outside a
// transaction, so a heartbeat's write to the jobs table goes on while it
// builds (inside the transaction, CREATE INDEX's SHARE lock held every
// write for the whole build).
func TestMigrateHoldsWritesAtMostALockTimeout(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	fillYoungQueue(t, db, 400_000)
	asVersion10(t, db)

	migrated := make(chan error, 1)
	go func() { migrated <- pgrouter.Migrate(context.Background(), db) }()
	// Real time: the build is a real server's. Wait until it runs.
	for {
		var n int
		require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_progress_create_index WHERE datname = current_database()").Scan(&n))
		if n > 0 {
			break
		}
		select {
		case err := <-migrated:
			t.Fatalf("Migrate ended before its build was seen: %v", err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	// No lock on the jobs table that holds off writes (SHARE and
	// stronger; CREATE INDEX CONCURRENTLY's SHARE UPDATE EXCLUSIVE lets
	// them go on) is taken while it builds.
	var blocking []string
	require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(array_agg(mode), '{}') FROM pg_locks
		WHERE database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND relation = 'leaserouter_jobs'::regclass AND mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')`).Scan(&blocking))
	// A heartbeat's write goes on, waiting for no lock longer than the
	// bound (a server's lock_timeout, not a clock of the test's: a busy
	// machine slows the write, not its lock wait).
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '300ms'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE leaserouter_jobs SET updated_at = now() WHERE queue = 'default' AND id = 'j2'")
		return err
	})
	migrateErr := <-migrated
	require.Empty(t, blocking, "locks holding off writes to the jobs table during Migrate's index build")
	require.NoError(t, err, "a write held up by Migrate's index build (at most 100ms)")
	require.NoError(t, migrateErr)
	requireIndexBuilt(t, db)
}

// TestMigrateRebuildsAnInvalidIndex: a concurrent build that fails or is
// canceled (Migrate's own, killed midway, or one by hand: a
// statement_timeout, a Ctrl-C) leaves an INVALID index (here version
// 23's, leaserouter_jobs_id_unleased),
// which CREATE INDEX IF NOT EXISTS would take as built and the planner
// never uses: Migrate drops it and builds it again.
func TestMigrateRebuildsAnInvalidIndex(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	fillYoungQueue(t, db, 200_000)
	asVersion10(t, db)
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET statement_timeout = '20ms'")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE INDEX CONCURRENTLY leaserouter_jobs_id_unleased ON leaserouter_jobs (queue, state, id COLLATE "C") INCLUDE (seq, purge_at) WHERE state <> 'leased'`)
	require.Error(t, err, "the by-hand build canceled")
	_, err = conn.Exec(ctx, "RESET statement_timeout")
	require.NoError(t, err)
	conn.Release()

	require.NoError(t, pgrouter.Migrate(ctx, db))
	requireIndexBuilt(t, db)
}

// TestMigrateRebuildsAnIndexOfAnotherDefinition: an index by the name
// leaserouter_jobs_id_unleased built by hand otherwise (IDs in the
// database's collation, where a prefix need not be a range, and leased
// jobs in it) is dropped and built again as migration 23 says.
func TestMigrateRebuildsAnIndexOfAnotherDefinition(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	asVersion10(t, db)
	_, err := db.Exec(ctx, `CREATE INDEX leaserouter_jobs_id_unleased ON leaserouter_jobs (queue, state, id) INCLUDE (seq, purge_at)`)
	require.NoError(t, err)
	require.NoError(t, pgrouter.Migrate(ctx, db))
	requireIndexBuilt(t, db)
}

// TestMigrateConcurrentWithAnIndexBuild: Migrates run at once while
// migration 11 is pending all succeed, one of them building the index
// (the others wait on Migrate's lock and then find it applied).
func TestMigrateConcurrentWithAnIndexBuild(t *testing.T) {
	db := pgtest.New(t)
	fillYoungQueue(t, db, 50_000)
	asVersion10(t, db)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pgrouter.Migrate(t.Context(), db) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	requireIndexBuilt(t, db)
}

// openSnapshot opens a REPEATABLE READ transaction holding a snapshot
// (any table's: CREATE INDEX CONCURRENTLY waits it out).
func openSnapshot(t *testing.T, db *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "SELECT 1")
	require.NoError(t, err)
	return tx
}

// TestMigrateBuildNotBoundedBySessionTimeouts: the index build waits,
// bounded only by ctx, for the transactions open when it starts, even on
// a pool whose sessions have a statement_timeout (it failed with 57014);
// the session's timeout is put back after.
func TestMigrateBuildNotBoundedBySessionTimeouts(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	asVersion10(t, db)
	cfg := db.Config().Copy()
	cfg.MaxConns = 1 // Migrate's connection is the one read after it
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "300"
	tdb, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer tdb.Close()

	snap := openSnapshot(t, db)
	ended := make(chan struct{})
	go func() { // the build waits for it far longer than the timeouts
		defer close(ended)
		time.Sleep(1500 * time.Millisecond)
		_ = snap.Rollback(context.Background())
	}()
	require.NoError(t, pgrouter.Migrate(ctx, tdb))
	<-ended
	requireIndexBuilt(t, db)
	var stmt string
	require.NoError(t, tdb.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&stmt))
	require.Equal(t, "300ms", stmt, "the session's statement_timeout after Migrate")
}

// waitBuild waits until a CREATE INDEX CONCURRENTLY runs in db's
// database.
func waitBuild(t *testing.T, db *pgxpool.Pool, migrated <-chan error) {
	t.Helper()
	for {
		var n int
		require.NoError(t, db.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_progress_create_index WHERE datname = current_database()").Scan(&n))
		if n > 0 {
			return
		}
		select {
		case err := <-migrated:
			t.Fatalf("Migrate ended before its build was seen: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestMigrateWithAPreviousVersionMigrate: during a rolling upgrade, a
// Migrate of the version before the concurrent index builds (one
// transaction that starts with pg_advisory_xact_lock on Migrate's key)
// runs while a new one builds an index: both succeed, the old
// one finding nothing to do. (It waited on the key inside its
// transaction, holding a snapshot the build waited out while the build's
// Migrate held the key: a deadlock, 40P01.)
func TestMigrateWithAPreviousVersionMigrate(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	fillYoungQueue(t, db, 20_000)
	asVersion10(t, db)
	// A writer on the jobs table holds the build in its first wait (for
	// the table's writers) while the old Migrate runs.
	writer, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = writer.Exec(ctx, "UPDATE leaserouter_jobs SET updated_at = now() WHERE queue = 'default' AND id = 'j2'")
	require.NoError(t, err)
	migrated := make(chan error, 1)
	go func() { migrated <- pgrouter.Migrate(context.Background(), db) }()
	waitBuild(t, db, migrated)

	old := make(chan error, 1)
	go func() { // the previous version's Migrate: one transaction, pg_advisory_xact_lock first
		old <- pgx.BeginFunc(context.Background(), db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateXactLock); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = 100"); err != nil {
				return err
			}
			var v int
			return tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM leaserouter_migrations").Scan(&v)
		})
	}()
	var oldErr error
	select {
	case oldErr = <-old:
	case <-time.After(30 * time.Second): // it waits for the build's Migrate
		require.NoError(t, writer.Rollback(ctx))
		oldErr = <-old
		require.Fail(t, "the old-version Migrate waited for the build", "then: %v", oldErr)
	}
	require.NoError(t, writer.Rollback(ctx))
	require.NoError(t, oldErr, "the old-version Migrate")
	require.NoError(t, <-migrated, "the new Migrate")
	requireIndexBuilt(t, db)
}

// Migrate's advisory lock keys (migrate.go): the one its transactions
// hold (and a Migrate of a version before the concurrent index builds
// held for its one transaction), and the one it holds for its session.
const (
	migrateXactLock    = int64(0x6c65617365726f75)
	migrateSessionLock = int64(0x6c65617365724d67)
)
