package pgtest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	SkipExamplesWithoutServer()
	os.Exit(Main(m))
}

// fakeTB records what need does to a test.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()                   {}
func (f *fakeTB) Skip(args ...any)          { f.skipped = fmt.Sprint(args...); runtime.Goexit() }
func (f *fakeTB) Fatalf(s string, a ...any) { f.failed = fmt.Sprintf(s, a...); runtime.Goexit() }

// onGoroutine runs f on a goroutine of its own, as Skip and Fatalf end it.
func onGoroutine(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// TestNeed: no PostgreSQL skips with the ways to get one (install
// commands, LEASEROUTER_TEST_DATABASE_URL), unless
// LEASEROUTER_REQUIRE_POSTGRES=1, which fails; any other start failure
// fails.
func TestNeed(t *testing.T) {
	err := errNoServer // StartCluster's, when it finds no server binaries
	t.Setenv(EnvRequire, "")
	f := &fakeTB{TB: t}
	onGoroutine(func() { need(f, err) })
	require.Contains(t, f.skipped, EnvURL)
	if runtime.GOOS != "windows" {
		require.Contains(t, f.skipped, "apt-get install postgresql")
		require.Contains(t, f.skipped, "brew install postgresql@15")
	}
	require.Empty(t, f.failed)

	t.Setenv(EnvRequire, "1")
	f = &fakeTB{TB: t}
	onGoroutine(func() { need(f, err) })
	require.Empty(t, f.skipped)
	require.Contains(t, f.failed, "no PostgreSQL server")

	t.Setenv(EnvRequire, "")
	f = &fakeTB{TB: t}
	onGoroutine(func() { need(f, fmt.Errorf("initdb: exit status 1")) })
	require.Empty(t, f.skipped)
	require.Contains(t, f.failed, "initdb")
}

// TestNewGivesFreshMigratedDatabases: each call is a database of its own,
// with pgrouter's schema, and data in one is not in another.
func TestNewGivesFreshMigratedDatabases(t *testing.T) {
	a, b := New(t), New(t)
	ctx := context.Background()
	_, err := a.Exec(ctx, "INSERT INTO leaserouter_fences VALUES ('k', 1)")
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM leaserouter_fences").Scan(&n))
	require.Zero(t, n)
	var na, nb string
	require.NoError(t, a.QueryRow(ctx, "SELECT current_database()").Scan(&na))
	require.NoError(t, b.QueryRow(ctx, "SELECT current_database()").Scan(&nb))
	require.NotEqual(t, na, nb)
}

// TestNewLocaleHasThatCollation: NewLocale's database collates as the
// locale says, not as the cluster's C, and is migrated.
func TestNewLocaleHasThatCollation(t *testing.T) {
	db := NewLocale(t, "C.UTF-8")
	ctx := context.Background()
	var collate string
	require.NoError(t, db.QueryRow(ctx, "SELECT datcollate FROM pg_database WHERE datname = current_database()").Scan(&collate))
	require.Contains(t, []string{"C.UTF-8", "C.utf8"}, collate)
	var n int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs").Scan(&n), "migrated")
	var c bool
	require.NoError(t, New(t).QueryRow(ctx, "SELECT datcollate = 'C' FROM pg_database WHERE datname = current_database()").Scan(&c))
	require.True(t, c, "New's stays C")
}

// TestNewICULocaleHasThatCollation: NewICULocale's database collates as
// ICU's locale says ("B" between "a" and "c", unlike C and C.UTF-8) and
// is migrated.
func TestNewICULocaleHasThatCollation(t *testing.T) {
	db := NewICULocale(t, "und")
	ctx := context.Background()
	var provider string
	var between bool
	require.NoError(t, db.QueryRow(ctx, "SELECT datlocprovider::text, 'a' < 'B' AND 'B' < 'c' FROM pg_database WHERE datname = current_database()").Scan(&provider, &between))
	require.Equal(t, "i", provider)
	require.True(t, between)
	var n int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs").Scan(&n), "migrated")
}

// TestWithDatabaseKeepsTheRest: a connection string, as a URL or as
// keyword/value settings, names another database and keeps its other
// settings.
func TestWithDatabaseKeepsTheRest(t *testing.T) {
	for conn, want := range map[string]string{
		"postgres://u:p%40ss@db.example:5433/postgres?sslmode=require": "postgres://u:p%40ss@db.example:5433/t1?sslmode=require",
		"postgresql://localhost":                              "postgresql://localhost/t1",
		"host=/tmp/x port=5432 user=postgres dbname=postgres": "host=/tmp/x port=5432 user=postgres dbname=postgres dbname=t1",
	} {
		got := withDatabase(conn, "t1")
		require.Equal(t, want, got)
		cfg, err := pgx.ParseConfig(got)
		require.NoError(t, err, got)
		require.Equal(t, "t1", cfg.Database, got)
		orig, err := pgx.ParseConfig(conn)
		require.NoError(t, err)
		require.Equal(t, orig.Host, cfg.Host)
		require.Equal(t, orig.User, cfg.User)
		require.Equal(t, orig.Password, cfg.Password)
		require.Equal(t, orig.TLSConfig == nil, cfg.TLSConfig == nil)
	}
}

// TestDatabaseGivesFreshMigratedDatabasesThatDropDrops: each Database is
// a database of its own, migrated (pgrouter's tables are there, empty),
// and its drop drops it (a second drop returns the first one's result).
func TestDatabaseGivesFreshMigratedDatabasesThatDropDrops(t *testing.T) {
	if err := Available(); err != nil && os.Getenv(EnvRequire) != "1" {
		t.Skip(err)
	}
	ctx := t.Context()
	url1, drop1, err := Database(ctx)
	require.NoError(t, err)
	url2, drop2, err := Database(ctx)
	require.NoError(t, err)
	defer drop2()
	require.NotEqual(t, url1, url2)

	conn, err := pgx.Connect(ctx, url1)
	require.NoError(t, err)
	var name string
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database(), (SELECT count(*) FROM leaserouter_jobs)").Scan(&name, &n))
	require.Zero(t, n)
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, drop1())
	require.NoError(t, drop1())
	conn, err = pgx.Connect(ctx, url2)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	require.False(t, exists, "drop dropped %s", name)
}

// TestAvailableWithAURL: LEASEROUTER_TEST_DATABASE_URL is a server, as
// far as Available can tell without connecting.
func TestAvailableWithAURL(t *testing.T) {
	t.Setenv(EnvURL, "postgres://nowhere.invalid/db")
	require.NoError(t, Available())
}
