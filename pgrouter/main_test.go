package pgrouter_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(envHolderURL) != "" {
		os.Exit(holdLease()) // a holder process of latency_test.go, not a test run
	}
	if dsn := os.Getenv(envProcsChild); dsn != "" { // a worker process of BenchmarkProcesses
		os.Exit(procsChild(dsn))
	}
	if dsn := os.Getenv(envPeriodicChild); dsn != "" { // a scheduler process of TestPeriodicOneJobPerTickAcrossKilledProcesses
		os.Exit(periodicChild(dsn))
	}
	pgtest.SkipExamplesWithoutServer() // the Examples need a server: skipped without one, as the tests are
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
