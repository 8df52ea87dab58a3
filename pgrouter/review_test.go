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

