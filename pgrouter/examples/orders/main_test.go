package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"

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
	// A fresh database of the server at LEASEROUTER_TEST_DATABASE_URL
	// when that is set and LEASEROUTER_DATABASE_URL is not (else serve
	// uses LEASEROUTER_DATABASE_URL, or starts a throwaway cluster).
	if os.Getenv(pgtest.EnvURL) != "" && os.Getenv(envURL) == "" {
		t.Setenv(envURL, pgtest.New(t).Config().ConnString())
	}
	var log bytes.Buffer
	s, err := serve(t.Context(), config{orders: 200, fail: 0.2}, &log)
	if errors.Is(err, pgtest.ErrNoPostgres) && os.Getenv(pgtest.EnvRequire) != "1" {
		t.Skip(err)
	}
	require.NoError(t, err, log.String())
	require.Equal(t, 200, s.orders)
	require.Equal(t, 200, s.charged)
	require.Equal(t, 200, s.receipts)
	require.Zero(t, s.doubleCharged)
	require.Positive(t, s.failed, "a fifth of the attempts failed: retries ran")
	require.GreaterOrEqual(t, s.attempts, int64(400)+s.failed)
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
