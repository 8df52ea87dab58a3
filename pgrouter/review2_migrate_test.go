package pgrouter_test

// Review 2 (cold review of Migrate's concurrent index build): failing tests.

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

const review2MigrateLock = int64(0x6c65617365726f75) // migrate.go's migrateLock

// review2WaitBuild waits until a CREATE INDEX CONCURRENTLY runs in db's
// database.
func review2WaitBuild(t *testing.T, db *pgxpool.Pool, migrated <-chan error) {
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
		default:
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReview2MigrateWithAnOldVersionMigrate: during a rolling upgrade a
// process of the previous version (bbe4516) runs its Migrate while a new
// one builds leaserouter_jobs_id. The old Migrate waits in
// pg_advisory_xact_lock (same key) inside a transaction, holding a
// snapshot; the build waits out that snapshot; the old one waits for the
// new one's session lock: a deadlock, which the server breaks by failing
// one of them (40P01). Both should succeed (the old one finds nothing to
// do).
func TestReview2MigrateWithAnOldVersionMigrate(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	fillYoungQueue(t, db, 20_000)
	asVersion10(t, db)
	// A writer on the jobs table holds the build in its first wait (for
	// the table's writers) until the old Migrate waits for the lock.
	writer, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = writer.Exec(ctx, "UPDATE leaserouter_jobs SET updated_at = now() WHERE queue = 'default' AND id = 'j2'")
	require.NoError(t, err)
	migrated := make(chan error, 1)
	go func() { migrated <- pgrouter.Migrate(context.Background(), db) }()
	review2WaitBuild(t, db, migrated)

	old := make(chan error, 1)
	go func() { // bbe4516's migrateOnce: one transaction, pg_advisory_xact_lock first
		old <- pgx.BeginFunc(context.Background(), db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", review2MigrateLock); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = 100"); err != nil {
				return err
			}
			var v int
			return tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM leaserouter_migrations").Scan(&v)
		})
	}()
	for { // the old Migrate waits on the lock
		var n int
		require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&n))
		if n > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, writer.Rollback(ctx))
	oldErr, newErr := <-old, <-migrated
	require.NoError(t, oldErr, "the old-version Migrate")
	require.NoError(t, newErr, "the new Migrate")
	requireIndexBuilt(t, db)
}

// TestReview2MigrateCanceledReleasesItsLock: a Migrate whose ctx ends
// while its build waits gives up Migrate's session lock. pgx's default
// context handling only closes the socket: the server backend goes on
// with the CREATE INDEX CONCURRENTLY (it notices the client gone only
// when it next talks to it), holding the session advisory lock, so the
// next Migrate waits for that orphan instead of dropping an INVALID index
// and building again as documented.
func TestReview2MigrateCanceledReleasesItsLock(t *testing.T) {
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
		WHERE l.locktype = 'advisory' AND l.granted AND (l.classid::bigint << 32 | l.objid::bigint) = $1`, review2MigrateLock).Scan(&holders))
	require.Empty(t, holders, "sessions still holding Migrate's advisory lock 1s after Migrate returned")
}

// TestReview2MigrateAppliesAMissingVersion: a database that recorded 12
// but not 11 (Migrate applies only versions above the highest recorded)
// never gets leaserouter_jobs_id, and New accepts it.
func TestReview2MigrateAppliesAMissingVersion(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, "DROP INDEX leaserouter_jobs_id")
	require.NoError(t, err)
	_, err = db.Exec(ctx, "DELETE FROM leaserouter_migrations WHERE version = 11")
	require.NoError(t, err)
	require.NoError(t, pgrouter.Migrate(ctx, db))
	requireIndexBuilt(t, db)
}
