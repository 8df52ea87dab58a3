package cputime

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProcessCounts: the process's CPU time grows with work done, and
// Server refuses a directory with no server's data in it.
func TestProcessCounts(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		require.Zero(t, Process())
		return
	}
	before := Process()
	x := uint64(1)
	for i := range uint64(50_000_000) { // some tens of milliseconds of work
		x = x*6364136223846793005 + i
	}
	require.NotZero(t, x)
	require.Greater(t, Process(), before, "CPU time after work")
	_, err := Server(t.TempDir())
	require.Error(t, err)
}
