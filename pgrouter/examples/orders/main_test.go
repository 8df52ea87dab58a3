package main

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestMain fails the tests if a Client's goroutine outlives serve.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestEveryOrderChargedOnceWithOneReceipt: with a fifth of the attempts
// failed by the middleware and two Clients sharing the job set, every
// order placed (with its charge job, in one transaction) is charged
// exactly once and gets exactly one receipt (a follow-up of another
// kind, enqueued in the charge's transaction).
func TestEveryOrderChargedOnceWithOneReceipt(t *testing.T) {
	testDatabase(t)
	var log bytes.Buffer
	s, err := serve(t.Context(), config{orders: 200, fail: 0.2}, &log)
	require.NoError(t, err, log.String())
	require.Equal(t, 200, s.orders)
	require.Equal(t, 200, s.charged)
	require.Equal(t, 200, s.receipts)
	require.Zero(t, s.doubleCharged)
	require.Positive(t, s.failed, "a fifth of the attempts failed: retries ran")
	require.GreaterOrEqual(t, s.attempts, int64(400)+s.failed)
}

// testDatabase points the program at a fresh database of pgtest's (the
// server at LEASEROUTER_TEST_DATABASE_URL, or a throwaway cluster),
// whatever LEASEROUTER_DATABASE_URL names: the program truncates its
// tables there.
func testDatabase(t *testing.T) {
	t.Setenv(envURL, pgtest.New(t).Config().ConnString())
}

// TestTheTestsLeaveTheDatabaseAtLEASEROUTER_DATABASE_URLAlone: with
// LEASEROUTER_DATABASE_URL exported (a developer's database, which the
// program's docs invite), the tests run the program on a database of
// their own: the orders there are kept, and none are added.
func TestTheTestsLeaveTheDatabaseAtLEASEROUTER_DATABASE_URLAlone(t *testing.T) {
	users := pgtest.New(t) // stands in for the developer's database
	_, err := users.Exec(t.Context(), `CREATE TABLE orders (id bigint PRIMARY KEY, cents bigint NOT NULL,
		charged boolean NOT NULL DEFAULT false, charges int NOT NULL DEFAULT 0);
		INSERT INTO orders VALUES (4711, 999)`)
	require.NoError(t, err)
	t.Setenv(envURL, users.Config().ConnString())

	testDatabase(t)
	var log bytes.Buffer
	s, err := serve(t.Context(), config{orders: 10}, &log)
	require.NoError(t, err, log.String())
	require.Equal(t, 10, s.charged)
	rows, err := users.Query(t.Context(), "SELECT id FROM orders")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{4711}, ids, "the orders at %s", envURL)
}

// TestBadUsage: bad flags exit 2, -h exits 0.
func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{{"-orders", "0"}, {"-fail", "0.9"}, {"extra"}, {"-nope"}} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errOut), "%v", args)
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &out, &errOut))
}
