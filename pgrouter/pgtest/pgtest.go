// Package pgtest gives a test a fresh PostgreSQL database, migrated for
// pgrouter, in one call:
//
//	db := pgtest.New(t) // *pgxpool.Pool; the database is dropped when t ends
//
// Code without a testing.TB (an Example) calls Database instead (see its
// example), with SkipExamplesWithoutServer in TestMain.
//
// The server is the one at LEASEROUTER_TEST_DATABASE_URL when that is set
// (a connection string, as for pgx, of a role that may create databases:
// CREATEDB or a superuser), on any system, Windows included: pgtest
// creates there a template database migrated once per test process
// (collation C, UTF-8, as a throwaway cluster's), and each test's
// database is cloned from it. Otherwise it is a throwaway cluster
// started from the PostgreSQL server binaries on the machine (see
// StartCluster; Unix systems only), one per test process, with each
// test's database cloned from a migrated template (about 0.1 s). With
// neither, the test is skipped with a message saying how to get a
// server — unless LEASEROUTER_REQUIRE_POSTGRES=1, which makes it fail
// (CI sets it).
//
// pgtest reads LEASEROUTER_TEST_DATABASE_URL only, never DATABASE_URL:
// it creates and drops databases on the server it is given, which a
// general DATABASE_URL (a development or production database) should not
// get by accident. To run the tests against it, say so:
// LEASEROUTER_TEST_DATABASE_URL=$DATABASE_URL go test ./... . The
// databases pgtest creates there are named leaserouter_test_* and
// leaserouter_template_*; they are dropped when their test (template:
// process, through Main) ends. A test process that ends before then (a
// panic, go test -timeout, an interrupt, a kill) leaves them, and the
// next test process to use the server drops them: each process holds a
// session-level advisory lock there while it lives (the two-key lock
// 1819440231 and a random key, on a connection it keeps open until Main
// ends), and at its first use of the server drops the databases of
// processes whose lock is free — never those of a test process still
// running, on this host or another. Dropping another role's databases
// takes that role (or a superuser). Besides that connection, a test
// process uses one while it creates a database and its tests' pools:
// go test ./... runs test processes of several packages at once (-p, the
// number of CPUs by default), which a server's max_connections must
// allow (a throwaway cluster allows its one process 200).
//
// Tests that stop and restart the server take a cluster of their own with
// NewCluster, so they never disturb the shared one; they need the server
// binaries, even when LEASEROUTER_TEST_DATABASE_URL is set (on Windows
// they are skipped).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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

// template is the migrated database every test's database on a throwaway
// cluster is cloned from.
const template = "leaserouter_template"

// ErrNoPostgres: no PostgreSQL server to run the tests against — neither
// LEASEROUTER_TEST_DATABASE_URL nor server binaries to start a throwaway
// cluster from. StartCluster's error wraps it and says how to get one.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL server")

var shared struct {
	once    sync.Once
	cluster *Cluster
	err     error
}

// New returns a pool on a fresh database migrated with pgrouter.Migrate,
// on the shared server (see the package doc). The pool is closed and the
// database dropped when t ends. The pool's Config().ConnString() is the
// database's connection string, for a program under test that connects
// by itself (a child process, a command's main). No server: t is
// skipped, or fails under LEASEROUTER_REQUIRE_POSTGRES=1; a server at
// LEASEROUTER_TEST_DATABASE_URL that refuses the connection or the
// template fails t, as does any other failure.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	if url := os.Getenv(EnvURL); url != "" {
		return fresh(t, url, urlTemplate(t, url))
	}
	return fresh(t, sharedCluster(t).URL("postgres"), template)
}

// servers are the servers named by LEASEROUTER_TEST_DATABASE_URL that
// this process has used, by URL, each with its template.
var servers struct {
	mu    sync.Mutex
	byURL map[string]*urlServer
}

// urlServer is a server named by LEASEROUTER_TEST_DATABASE_URL.
type urlServer struct {
	once     sync.Once
	template string    // the migrated template, "" until created
	hold     *pgx.Conn // holds this process's lock on the server (owner.go); guarded by servers.mu
	err      error
}

// urlTemplate is the migrated template of the server at url, created at
// the first call. It is the process's own (named for it, dropped by
// Main): processes sharing a server, or testing other versions of the
// schema, never clone each other's. Its collation is C, its encoding
// UTF-8, whatever the server's default. Before it is created, the
// process takes its lock on the server and drops what ended processes
// left there (owner.go). A failure fails t.
func urlTemplate(t testing.TB, url string) string {
	t.Helper()
	template, err := urlTemplateErr(url)
	if err != nil {
		t.Fatalf("pgtest: %s: %v", EnvURL, err)
	}
	return template
}

// urlTemplateErr is urlTemplate, returning its failure.
func urlTemplateErr(url string) (string, error) {
	servers.mu.Lock()
	if servers.byURL == nil {
		servers.byURL = map[string]*urlServer{}
	}
	s := servers.byURL[url]
	if s == nil {
		s = &urlServer{}
		servers.byURL[url] = s
	}
	servers.mu.Unlock()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := hold(ctx, url)
		if err != nil {
			s.err = err
			return
		}
		servers.mu.Lock()
		s.hold = conn
		servers.mu.Unlock()
		if err := sweepDead(ctx, conn); err != nil {
			s.err = fmt.Errorf("pgtest: drop the databases of ended test processes: %w", err)
			return
		}
		name := templateName()
		if s.err = createTemplate(ctx, url, name); s.err == nil {
			s.template = name
		}
	})
	return s.template, s.err
}

// dropTemplate drops the template this process made on the server at url
// (if any), releases the process's lock there, and forgets the server.
func dropTemplate(url string) error {
	servers.mu.Lock()
	s := servers.byURL[url]
	delete(servers.byURL, url)
	var conn *pgx.Conn
	if s != nil {
		conn, s.hold = s.hold, nil
	}
	servers.mu.Unlock()
	if conn != nil {
		// Released last: the template is gone by then, or this process
		// ended its use of the server without dropping it (a failure
		// below), and the next process's sweep drops it.
		defer conn.Close(context.Background())
	}
	if s == nil || s.template == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("drop %s: %w", s.template, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+s.template+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop %s: %w", s.template, err)
	}
	return nil
}

// sharedCluster is the shared cluster, started with its migrated template
// at the first call; no server: t is skipped, or fails under
// LEASEROUTER_REQUIRE_POSTGRES=1.
func sharedCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := sharedClusterErr()
	if err != nil {
		need(t, err)
	}
	return c
}

// sharedClusterErr is sharedCluster, returning its failure.
func sharedClusterErr() (*Cluster, error) {
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared.cluster, shared.err = StartCluster(ctx)
		if shared.err == nil {
			shared.err = shared.cluster.migrateTemplate(ctx)
		}
	})
	return shared.cluster, shared.err
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
		urlTemplate(t, url) // the process's lock there, before its first database
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
		urlTemplate(t, url) // the process's lock there, before its first database
		return freshLocale(t, url, "", locale)
	}
	return freshLocale(t, sharedCluster(t).URL("postgres"), "", locale)
}

// dbLocale is a database's locale: os (LOCALE), and icu, when not "",
// its ICU collation (LOCALE_PROVIDER icu, ICU_LOCALE).
type dbLocale struct{ os, icu string }

// NewCluster starts a cluster of the test's own, with a migrated template
// for its Pool; it is stopped and removed when t ends. For tests that stop
// or crash the server. Without server binaries t is skipped, or fails
// under LEASEROUTER_REQUIRE_POSTGRES=1; on a system with no throwaway
// clusters (Windows) t is always skipped; any other failure fails t.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := StartCluster(ctx)
	if err != nil && !clusters {
		t.Skip(err.Error()) // even under LEASEROUTER_REQUIRE_POSTGRES=1: no system setting makes one here
	}
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

// need skips or fails t for err, a failure to start a server: skips it
// for ErrNoPostgres unless LEASEROUTER_REQUIRE_POSTGRES=1.
func need(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoPostgres) && os.Getenv(EnvRequire) != "1" {
		t.Skip(err.Error())
	}
	t.Fatalf("%v (%s=%s)", err, EnvRequire, os.Getenv(EnvRequire))
}

// migrateTemplate creates the cluster's template database and migrates
// it.
func (c *Cluster) migrateTemplate(ctx context.Context) error {
	return createTemplate(ctx, c.URL("postgres"), template)
}

// createTemplate creates database name on the server at adminURL and
// migrates it; a database that fails to migrate is dropped.
func createTemplate(ctx context.Context, adminURL, name string) error {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	// Collation C and UTF-8 whatever the server's default (a container's
	// is often en_US.utf8): the tests' databases are alike on every
	// server, as on a throwaway cluster.
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C'"); err != nil {
		return fmt.Errorf("pgtest: create template: %w", err)
	}
	db, err := pgxpool.New(ctx, withDatabase(adminURL, name))
	if err == nil {
		err = pgrouter.Migrate(ctx, db)
		db.Close() // CREATE DATABASE ... TEMPLATE needs it unused
	}
	if err != nil {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return fmt.Errorf("pgtest: migrate template: %w", err)
	}
	return nil
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
	name := dbName(adminURL, dbSeq.Add(1))
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
	db, err := pgxpool.New(ctx, withDatabase(adminURL, name))
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
// and removes its directory, drops the templates made on servers named by
// LEASEROUTER_TEST_DATABASE_URL and closes the connections holding the
// process's locks there, and returns the exit code; call it from
// TestMain, as os.Exit(pgtest.Main(m)). Without it the shared server
// still dies with the test process (its directory is then removed by the
// next cluster started on the machine), but goroutine-leak checks would
// see the one that waits for it, and the templates stay on their server
// until the next test process there drops them.
func Main(m *testing.M) int {
	code := m.Run()
	servers.mu.Lock()
	var urls []string
	for url := range servers.byURL {
		urls = append(urls, url)
	}
	servers.mu.Unlock()
	for _, url := range urls {
		if err := dropTemplate(url); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	if shared.cluster != nil {
		if err := shared.cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}

// withDatabase is the connection string conn (a URL or keyword/value
// settings) with its database name set to name, everything else kept
// (TLS settings, passwords, options).
func withDatabase(conn, name string) string {
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path, u.RawPath = "/"+name, ""
		return u.String()
	}
	return conn + " dbname=" + name // the last setting of a name wins
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
