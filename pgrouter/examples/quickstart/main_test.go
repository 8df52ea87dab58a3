package main

import (
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestMain fails the tests if a Client's goroutine outlives main.
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

// TestQuickstartPrintsHelloWorld runs the README's PostgreSQL program on a
// fresh database, twice: each run's job runs once (a second run on the
// same database enqueues a job of its own, no duplicate ID), and main
// returns once the Client has stopped.
func TestQuickstartPrintsHelloWorld(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtest.New(t).Config().ConnString())
	require.Equal(t, "hello, world\n", stdout(t, main))
	require.Equal(t, "hello, world\n", stdout(t, main))
}

// stdout is what f prints on os.Stdout.
func stdout(t *testing.T, f func()) string {
	t.Helper()
	rd, wr, err := os.Pipe()
	require.NoError(t, err)
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(rd)
		_ = rd.Close()
		out <- string(b)
	}()
	saved := os.Stdout
	os.Stdout = wr
	func() {
		defer func() { os.Stdout = saved }()
		f()
	}()
	require.NoError(t, wr.Close())
	return <-out
}
