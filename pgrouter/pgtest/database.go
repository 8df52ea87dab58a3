package pgtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Database creates a fresh database migrated with pgrouter.Migrate on the
// shared server (see the package doc), for code that has no testing.TB:
// an Example, a program's own test harness. It returns the database's
// connection string, for pgxpool.New or pgx.Connect, and drop, which
// drops the database (ending its sessions); call drop when done, and from
// a test process call Main from TestMain, which stops the shared server
// at the end. drop may be called more than once: the later calls return
// the first one's result.
//
// With no server (neither LEASEROUTER_TEST_DATABASE_URL nor server
// binaries) the error wraps ErrNoPostgres, whatever
// LEASEROUTER_REQUIRE_POSTGRES says: the caller decides what that means
// (see SkipExamplesWithoutServer). Starting the shared server, creating
// its template and this database each take up to a minute before they
// fail; ctx bounds the creation of the database. Safe for concurrent use.
func Database(ctx context.Context) (url string, drop func() error, err error) {
	var adminURL, tmpl string
	if u := os.Getenv(EnvURL); u != "" {
		if tmpl, err = urlTemplateErr(u); err != nil {
			return "", nil, fmt.Errorf("pgtest: %s: %w", EnvURL, err)
		}
		adminURL = u
	} else {
		c, err := sharedClusterErr()
		if err != nil {
			return "", nil, err
		}
		adminURL, tmpl = c.URL("postgres"), template
	}
	name := dbName(adminURL, dbSeq.Add(1)) // on a server at the URL: swept if this process ends before drop
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("pgtest: connect: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl); err != nil {
		return "", nil, fmt.Errorf("pgtest: create database: %w", err)
	}
	drop = sync.OnceValue(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return fmt.Errorf("pgtest: drop %s: %w", name, err)
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("pgtest: drop %s: %w", name, err)
		}
		return nil
	})
	return withDatabase(adminURL, name), drop, nil
}

// Available reports whether Database and New can have a server, without
// starting one: nil when LEASEROUTER_TEST_DATABASE_URL is set (whether
// that server answers is found out at the first use) or PostgreSQL's
// server binaries are found (see StartCluster); else an error wrapping
// ErrNoPostgres that says how to get one.
func Available() error {
	if os.Getenv(EnvURL) != "" {
		return nil
	}
	return findServer()
}

// SkipExamplesWithoutServer makes go test skip the test binary's Examples
// when there is no server (Available's error) and
// LEASEROUTER_REQUIRE_POSTGRES is not "1": an Example cannot skip itself,
// and one that calls Database would fail. It sets the -test.skip flag to
// "^Example" (a -skip given to go test replaces it) and says so on
// stderr, and reports whether it did. Call it from TestMain before
// m.Run or Main, in a package whose Examples need a server; its tests
// skip by themselves (New).
func SkipExamplesWithoutServer() bool {
	err := Available()
	if err == nil || os.Getenv(EnvRequire) == "1" {
		return false
	}
	if flag.Set("test.skip", "^Example") != nil {
		return false // not a test binary
	}
	fmt.Fprintf(os.Stderr, "pgtest: Examples skipped: %v\n", err)
	return true
}
