package pgrouter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/routertest"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// icuDatabase is a fresh migrated database whose default collation is
// the ICU locale icu (PostgreSQL 15+ built with ICU), on pgtest's server.
// Unlike glibc's C.UTF-8 (code point order, the same as byte order in
// UTF-8), an ICU collation orders "B" between "a" and "c" and ignores
// punctuation at its first level: an ID prefix is then not a range of
// the database's order.
func icuDatabase(t *testing.T, icu string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := pgtest.New(t).Config().ConnConfig.Copy()
	cfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer admin.Close(ctx)
	name := fmt.Sprintf("leaserouter_review_%d_%08x", os.Getpid(), rand.Uint32())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE '"+icu+"'")
	if err != nil {
		t.Skipf("no ICU database: %v", err)
	}
	pcfg, err := pgxpool.ParseConfig("")
	require.NoError(t, err)
	pcfg.ConnConfig = cfg.Copy()
	pcfg.ConnConfig.Database = name
	db, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if admin, err := pgx.ConnectConfig(ctx, cfg); err == nil {
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = admin.Close(ctx)
		}
	})
	require.NoError(t, pgrouter.Migrate(ctx, db))
	var before bool
	require.NoError(t, db.QueryRow(ctx, "SELECT 'a' < 'B' AND 'B' < 'c'").Scan(&before))
	require.True(t, before, "the ICU collation is not byte order")
	return db
}

// TestListUnderICUCollation runs the List rows on databases whose
// collation is ICU's root locale, where, unlike C.UTF-8
// (TestListUnderDebianCollation: code point order, which is byte order),
// the IDs with a prefix are not one range of the database's order.
func TestListUnderICUCollation(t *testing.T) {
	h := pgHarness{icu: "und"}
	for _, row := range []string{"admin/List pages newest first, keyset: nothing skipped or repeated",
		"admin/List's IDPrefix is a literal byte prefix"} {
		t.Run(row, func(t *testing.T) { routertest.RunRow(t, h, row) })
	}
}

// TestMigrateHoldsWritesAtMostALockTimeout: Migrate's doc promises that
// it "never stalls the queue behind a long transaction" and that other
// statements "are held up at most" migrateLockTimeout (100ms). Migration
// 0011 builds leaserouter_jobs_id inside the migration's transaction
// (CREATE INDEX, not CONCURRENTLY): once it has its SHARE lock, every
// write to the jobs table (a heartbeat, a claim, a completion) waits for
// the whole build, however long, so leases of a large table expire while
// a fleet rolls out a version that runs Migrate at start.
func TestMigrateHoldsWritesAtMostALockTimeout(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	fillYoungQueue(t, db, 400_000)
	// The database as schema version 10 left it.
	_, err := db.Exec(ctx, "DROP INDEX leaserouter_jobs_id")
	require.NoError(t, err)
	_, err = db.Exec(ctx, "DELETE FROM leaserouter_migrations WHERE version = 11")
	require.NoError(t, err)

	migrated := make(chan error, 1)
	go func() { migrated <- pgrouter.Migrate(context.Background(), db) }()
	// Wait until the build runs (the migration holds its lock).
	for {
		var n int
		require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_progress_create_index").Scan(&n))
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
	start := time.Now()
	_, err = db.Exec(ctx, "UPDATE leaserouter_jobs SET updated_at = now() WHERE queue = 'default' AND id = 'j2'") // a heartbeat's write
	held := time.Since(start)
	require.NoError(t, err)
	require.NoError(t, <-migrated)
	require.Less(t, held, 300*time.Millisecond, "a write held up by Migrate's index build for %v (the doc: at most 100ms)", held)
}

// TestMigrateAfterAFailedConcurrentBuild: the doc's advice for a large
// table is to run CREATE INDEX CONCURRENTLY leaserouter_jobs_id by hand
// first, "this statement then finds it". A concurrent build that fails or
// is canceled (a statement_timeout, a Ctrl-C, a deadlock) leaves an
// INVALID index under that name; migration 0011's CREATE INDEX IF NOT
// EXISTS then finds it, and Migrate records version 11 with an index the
// planner never uses and nothing ever rebuilds: List's rare prefixes fall
// back to reading the whole state. Expected: Migrate refuses (or
// rebuilds) an invalid leaserouter_jobs_id.
func TestMigrateAfterAFailedConcurrentBuild(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	fillYoungQueue(t, db, 200_000)
	_, err := db.Exec(ctx, "DROP INDEX leaserouter_jobs_id")
	require.NoError(t, err)
	_, err = db.Exec(ctx, "DELETE FROM leaserouter_migrations WHERE version = 11")
	require.NoError(t, err)
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET statement_timeout = '20ms'")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE INDEX CONCURRENTLY leaserouter_jobs_id ON leaserouter_jobs (queue, state, id COLLATE "C") INCLUDE (seq, purge_at)`)
	require.Error(t, err, "the by-hand build canceled")
	_, err = conn.Exec(ctx, "RESET statement_timeout")
	require.NoError(t, err)
	conn.Release()

	require.NoError(t, pgrouter.Migrate(ctx, db))
	var valid bool
	require.NoError(t, db.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'leaserouter_jobs_id'::regclass`).Scan(&valid))
	require.True(t, valid, "Migrate recorded version 11 over an INVALID leaserouter_jobs_id")
}
