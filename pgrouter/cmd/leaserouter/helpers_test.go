package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// envMain: "1" makes the test binary the command (main), for tests that
// signal it.
const envMain = "LEASEROUTER_CLI_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		main()
	}
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil { // every Router the CLI opened was closed
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// db is a fresh migrated database for a test: its URL, as the CLI takes
// it, and a pool on it.
type db struct {
	url  string
	pool *pgxpool.Pool
}

func newDB(t *testing.T) db {
	t.Helper()
	pool := pgtest.New(t)
	return db{url: urlOf(pool), pool: pool}
}

// urlOf is a connection string for pool's database: the pool's own
// (TLS settings, password and options kept, as the server at
// LEASEROUTER_TEST_DATABASE_URL may need them), naming the database of
// its config: a pool made from a config whose database was set by hand
// (as TestMigrateBringsAnEmptyDatabaseToTheSchema's) has a connection
// string naming another.
func urlOf(pool *pgxpool.Pool) string {
	cfg := pool.Config()
	conn, name := cfg.ConnString(), cfg.ConnConfig.Database
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path, u.RawPath = "/"+name, ""
		q := u.Query()
		q.Del("dbname") // it would name the database instead of the path
		u.RawQuery = q.Encode()
		return u.String()
	}
	// The last setting of a name wins; a value quoted, its quotes and
	// backslashes escaped.
	return conn + " dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name) + "'"
}

// router is a Router on queue of d, closed when t ends (leases still held
// revoked at once).
func (d db) router(t *testing.T, queue string) *router {
	t.Helper()
	r, err := pgrouter.New[json.RawMessage](t.Context(), d.pool, pgrouter.Options{Queue: queue, MaxAttempts: 3})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = r.Close(ctx)
	})
	return r
}

// result is what one run of the CLI did.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the command line args with $DATABASE_URL set to url ("": unset).
func cli(t *testing.T, url string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	env := func(k string) string {
		if k == envURL {
			return url
		}
		return ""
	}
	code := run(t.Context(), args, env, &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// ok runs args, requires success and returns stdout.
func (d db) ok(t *testing.T, args ...string) string {
	t.Helper()
	res := cli(t, d.url, args...)
	require.Equal(t, exitOK, res.code, "%q: %s", args, res.stderr)
	require.Empty(t, res.stderr, "%q", args)
	return res.stdout
}

// jsonOf runs args (with --json added), requires success and decodes
// stdout, which must be one JSON document, into v.
func (d db) jsonOf(t *testing.T, v any, args ...string) {
	t.Helper()
	out := d.ok(t, append(args, "--json")...)
	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), out)
	require.False(t, dec.More(), "one JSON document: %s", out)
}

// enqueue adds jobs ids to r with payload {"n":i}.
func enqueue(t *testing.T, r *router, ids ...string) {
	t.Helper()
	for i, id := range ids {
		require.NoError(t, r.Enqueue(t.Context(), id, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))))
	}
}

// lease leases the next job of r to worker "w", requiring it to be id.
func lease(t *testing.T, r *router, id string) *pgrouter.Lease[json.RawMessage] {
	t.Helper()
	l, err := r.TryAcquire(t.Context(), "w")
	require.NoError(t, err)
	require.Equal(t, id, l.JobID)
	return l
}

// kill enqueues id on r and makes it dead with error msg.
func kill(t *testing.T, r *router, id, msg string) {
	t.Helper()
	enqueue(t, r, id)
	require.NoError(t, lease(t, r, id).Fail(t.Context(), leaserouter.Permanent(fmt.Errorf("%s", msg))))
}

// job is job id of r, required to exist.
func job(t *testing.T, r *router, id string) leaserouter.Job[json.RawMessage] {
	t.Helper()
	j, ok, err := r.Get(t.Context(), id)
	require.NoError(t, err)
	require.True(t, ok, id)
	return j
}

// TestTheCommandGetsTheTestDatabasesTLSAndPassword: the connection
// string the tests hand the command reaches the pool's server as the pool
// does (LEASEROUTER_TEST_DATABASE_URL may name a server that requires
// TLS, with a password holding a quote) and names the pool's database,
// also one set on its config by hand.
func TestTheCommandGetsTheTestDatabasesTLSAndPassword(t *testing.T) {
	for _, conn := range []string{
		"postgres://tester:it's%20a%5C@db.example.com:5432/leaserouter_test_1?sslmode=require",
		`host=db.example.com port=5432 user=tester password='it\'s a\\' dbname=leaserouter_test_1 sslmode=require`,
	} {
		cfg, err := pgxpool.ParseConfig(conn)
		require.NoError(t, err)
		for _, database := range []string{"", "other_db"} {
			if database != "" {
				cfg.ConnConfig.Database = database
			}
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg) // lazy: no connection is made
			require.NoError(t, err)
			url := urlOf(pool)
			pool.Close()
			got, err := pgxpool.ParseConfig(url)
			require.NoError(t, err, "urlOf's string parses: %s", url)
			require.Equal(t, `it's a\`, got.ConnConfig.Password, url)
			require.NotNil(t, got.ConnConfig.TLSConfig, "sslmode=require kept: %s", url)
			require.Equal(t, cfg.ConnConfig.Database, got.ConnConfig.Database, url)
			require.Equal(t, "db.example.com", got.ConnConfig.Host, url)
			require.Equal(t, "tester", got.ConnConfig.User, url)
		}
	}
}
