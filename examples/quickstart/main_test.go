package main

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the tests if a worker outlives main.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestQuickstartPrintsHelloWorld runs the README's first program: its one
// job runs once, and main returns once the Client has stopped.
func TestQuickstartPrintsHelloWorld(t *testing.T) {
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
