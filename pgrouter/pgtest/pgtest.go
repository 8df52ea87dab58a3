// Package pgtest gives a test a fresh PostgreSQL database, migrated for
// pgrouter, in one call:
//
//	db := pgtest.New(t) // *pgxpool.Pool; the database is dropped when t ends
//
// The server is the one at LEASEROUTER_TEST_DATABASE_URL when that is set
// (a role that may create databases; each test's database is created and
// migrated there). Otherwise it is a throwaway cluster started from the
// system's PostgreSQL binaries (see StartCluster), one per test binary,
// with each test's database cloned from a migrated template (about 0.1 s).
// With neither, the test is skipped with the install command — unless
// LEASEROUTER_REQUIRE_POSTGRES=1, which makes it fail (CI sets it).
//
// Tests that stop and restart the server take a cluster of their own with
// NewCluster, so they never disturb the shared one.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter/pgrouter"
)

// The environment variables pgtest reads.
const (
	EnvURL     = "LEASEROUTER_TEST_DATABASE_URL" // use this server instead of a throwaway cluster
	EnvRequire = "LEASEROUTER_REQUIRE_POSTGRES"  // "1": no PostgreSQL fails the test instead of skipping it
)

// template is the migrated database every test's database is cloned from.
const template = "leaserouter_template"

var shared struct {
	once    sync.Once
	cluster *Cluster
	err     error
}

// New returns a pool on a fresh database migrated with pgrouter.Migrate,
// on the shared server (see the package doc). The pool is closed and the
// database dropped when t ends. No server: t is skipped, or fails under
// LEASEROUTER_REQUIRE_POSTGRES=1; any other failure fails t.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	if url := os.Getenv(EnvURL); url != "" {
		return fresh(t, url, "")
	}
	return fresh(t, sharedCluster(t).URL("postgres"), template)
}

// sharedCluster is the shared cluster, started with its migrated template
// at the first call; no server: t is skipped, or fails under
// LEASEROUTER_REQUIRE_POSTGRES=1.
func sharedCluster(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared.cluster, shared.err = StartCluster(ctx)
		if shared.err == nil {
			shared.err = shared.cluster.migrateTemplate(ctx)
		}
	})
	if shared.err != nil {
		need(t, shared.err)
	}
	return shared.cluster
}

// NewLocale is New with a database whose collation and character
// classification are locale (an operating system locale such as
// "C.UTF-8", Debian's default, or "en_US.UTF-8"), whatever the
// server's: to run a test under a collation other than the throwaway
// cluster's "C". It is created from template0 and migrated (about as
// long as Migrate takes, rather than New's clone). A locale the server
// does not know fails t, as any other failure to create the database.
func NewLocale(t testing.TB, locale string) *pgxpool.Pool {
	t.Helper()
	if url := os.Getenv(EnvURL); url != "" {
		return freshLocale(t, url, "", dbLocale{os: locale})
	}
	return freshLocale(t, sharedCluster(t).URL("postgres"), "", dbLocale{os: locale})
}

// NewICULocale is NewLocale with a database whose collation is the ICU
// locale icu (such as "und", ICU's root locale, or "en-US"; character
// classification "C.UTF-8"), on a server built with ICU (PostgreSQL 15's
// LOCALE_PROVIDER icu, as Debian's is). Unlike glibc's C.UTF-8, whose
// order is code point order (byte order, in UTF-8), an ICU collation
// orders "B" between "a" and "c" and ignores punctuation at first: the
// strings with a prefix need not be one range of its order. An icu the
// server does not know, or a server without ICU, fails t.
func NewICULocale(t testing.TB, icu string) *pgxpool.Pool {
	t.Helper()
	locale := dbLocale{os: "C.UTF-8", icu: icu}
	if url := os.Getenv(EnvURL); url != "" {
		return freshLocale(t, url, "", locale)
	}
	return freshLocale(t, sharedCluster(t).URL("postgres"), "", locale)
}

// dbLocale is a database's locale: os (LOCALE), and icu, when not "",
// its ICU collation (LOCALE_PROVIDER icu, ICU_LOCALE).
type dbLocale struct{ os, icu string }

// NewCluster starts a cluster of the test's own, with a migrated template
// for its Pool; it is stopped and removed when t ends. For tests that stop
// or crash the server.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := StartCluster(ctx)
	if err != nil {
		need(t, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.migrateTemplate(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// Pool returns a pool on a fresh migrated database of c, closed and
// dropped when t ends (if the server is up then).
func (c *Cluster) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return fresh(t, c.URL("postgres"), template)
}

// need skips or fails t for err, a failure to start a server.
func need(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoPostgres) && os.Getenv(EnvRequire) != "1" {
		t.Skip(err.Error())
	}
	t.Fatalf("%v (%s=%s)", err, EnvRequire, os.Getenv(EnvRequire))
}

// migrateTemplate creates the template database and migrates it.
func (c *Cluster) migrateTemplate(ctx context.Context) error {
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+template); err != nil {
		return fmt.Errorf("pgtest: create template: %w", err)
	}
	db, err := pgxpool.New(ctx, c.URL(template))
	if err != nil {
		return err
	}
	defer db.Close() // CREATE DATABASE ... TEMPLATE needs it unused
	return pgrouter.Migrate(ctx, db)
}

var dbSeq atomic.Int64

// fresh creates a database on the server at adminURL — cloned from
// template, or migrated when template is "" — and returns a pool on it.
func fresh(t testing.TB, adminURL, template string) *pgxpool.Pool {
	t.Helper()
	return freshLocale(t, adminURL, template, dbLocale{})
}

// freshLocale is fresh with a database of locale (the server's default
// when zero), created from template0 and migrated.
func freshLocale(t testing.TB, adminURL, template string, locale dbLocale) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Unique across processes and hosts sharing a server.
	name := fmt.Sprintf("leaserouter_test_%d_%d_%08x", os.Getpid(), dbSeq.Add(1), rand.Uint32())
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	create := "CREATE DATABASE " + name
	switch {
	case locale.os != "":
		create += " TEMPLATE template0 LOCALE " + quote(locale.os)
		if locale.icu != "" {
			create += " LOCALE_PROVIDER icu ICU_LOCALE " + quote(locale.icu)
		}
	case template != "":
		create += " TEMPLATE " + template
	}
	if _, err := admin.Exec(ctx, create); err != nil {
		t.Fatalf("pgtest: %s: %v", create, err)
	}
	cfg, err := pgxpool.ParseConfig(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = name
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if admin, err := pgx.Connect(ctx, adminURL); err == nil { // the server may be down: nothing to drop then
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = admin.Close(ctx)
		}
	})
	if template == "" {
		if err := pgrouter.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// Main runs m's tests, then stops the shared cluster (if one was started)
// and removes its directory, and returns the exit code; call it from
// TestMain, as os.Exit(pgtest.Main(m)). Without it the shared server
// still dies with the test process (its directory is then removed by the
// next cluster started on the machine), but goroutine-leak checks would
// see the one that waits for it.
func Main(m *testing.M) int {
	code := m.Run()
	if shared.cluster != nil {
		if err := shared.cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
