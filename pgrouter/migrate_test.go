package pgrouter_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// toSchemaV1 takes a migrated database back to schema version 1 (before
// the claim id), as a database migrated by an older pgrouter is.
func toSchemaV1(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
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

// TestMigrateDoesNotStallTheQueue: Migrate of a v1 database while a
// holder's transaction is open on the jobs table (work after CompleteTx)
// does not hold up the other statements on the table: it waits for the
// table in short tries (lock_timeout), so another lease's heartbeats go
// through meanwhile, each well within the lease; once the transaction
// commits, Migrate completes the migration.
func TestMigrateDoesNotStallTheQueue(t *testing.T) {
	const lease = 2 * time.Second
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: lease})
	ctx := t.Context()
	a := leaseOn(t, r, "a")
	b := leaseOn(t, r, "b")
	toSchemaV1(t, db)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, a.CompleteTx(ctx, tx)) // long work follows in tx
	migrated := make(chan error, 1)
	go func() { migrated <- pgrouter.Migrate(ctx, db) }()
	eventually(t, 10*time.Second, "Migrate waiting for the jobs table", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%ALTER TABLE leaserouter_jobs%'`).Scan(&n))
		return n > 0
	})
	// Heartbeats for a while: each returns well within the lease (a bound
	// far above a round trip plus Migrate's 100ms lock wait).
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for start := time.Now(); time.Since(start) < lease; <-tick.C {
		hctx, cancel := context.WithTimeout(ctx, lease/2)
		err := b.Heartbeat(hctx, nil)
		cancel()
		require.NoError(t, err, "another lease's heartbeat while Migrate waits for the holder's transaction")
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
	require.NoError(t, b.Complete(ctx))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
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
	files, err := filepath.Glob("migrations/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	v, err := strconv.Atoi(strings.SplitN(filepath.Base(files[len(files)-1]), "_", 2)[0])
	require.NoError(t, err)
	return v
}
