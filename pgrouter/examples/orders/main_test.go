package main

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestMain fails the tests if a Client's goroutine outlives serve.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEveryOrderChargedOnceWithOneReceipt: with a fifth of the attempts
// failed by the middleware and two Clients sharing the job set, every
// order placed (with its charge job, in one transaction) is charged
// exactly once and gets exactly one receipt (a follow-up of another
// kind, enqueued in the charge's transaction).
func TestEveryOrderChargedOnceWithOneReceipt(t *testing.T) {
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
