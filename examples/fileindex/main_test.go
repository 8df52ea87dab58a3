package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the tests if a worker, stalled or not, outlives run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// makeTree writes n files of varied sizes and line counts under a fresh
// directory, spread over nested folders, and returns it with their total size.
func makeTree(t *testing.T, n int) (string, int64) {
	t.Helper()
	root := t.TempDir()
	var total int64
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("d%d", i%7), fmt.Sprintf("e%d", i%3))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		data := []byte(strings.Repeat(fmt.Sprintf("line %d of file %d\n", i, i), i%50) + "no newline")
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", i)), data, 0o644))
		total += int64(len(data))
	}
	return root, total
}

// summary parses the final "fileindex: k=v ..." line of out.
func summary(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "fileindex: "), "no summary line in %q", out)
	m := map[string]string{}
	for _, f := range strings.Fields(strings.TrimPrefix(last, "fileindex: ")) {
		k, v, ok := strings.Cut(f, "=")
		require.True(t, ok, "field %q in %q", f, last)
		m[k] = v
	}
	return m
}

func num(t *testing.T, m map[string]string, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(m[key], 10, 64)
	require.NoError(t, err, "summary field %s", key)
	return n
}

func TestRunIndexesTreeDespiteFaults(t *testing.T) {
	root, size := makeTree(t, 200)
	var stdout, stderr bytes.Buffer
	// -stall 0.1 (drawn when no crash is) over 200 jobs: the chance of no
	// stall at all is about 0.905^200, 2e-9.
	code := run([]string{"-crash", "0.05", "-stall", "0.1", "-lease", "50ms", "-workers", "4", root}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	m := summary(t, stdout.String())
	require.Equal(t, int64(200), num(t, m, "files"))
	require.Equal(t, size, num(t, m, "bytes"))
	require.Zero(t, num(t, m, "mismatches"))
	require.Zero(t, num(t, m, "lost"))
	require.Positive(t, num(t, m, "expirations"), "faults were injected, so leases must have expired")
	require.Positive(t, num(t, m, "stale_blocked"), "every stall ends in a write the fence must block")
	require.Equal(t, int64(200)+num(t, m, "retries"), num(t, m, "leases"), "each lease is a first attempt or a retry")
}

func TestRunWithoutFaults(t *testing.T) {
	root, _ := makeTree(t, 30)
	var stdout, stderr bytes.Buffer
	// A long lease, so that not even a badly overloaded machine loses one.
	code := run([]string{"-workers", "3", "-lease", "1m", root}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	m := summary(t, stdout.String())
	require.Equal(t, int64(30), num(t, m, "files"))
	require.Equal(t, int64(30), num(t, m, "leases"), "one lease per file when nothing fails")
	require.Zero(t, num(t, m, "stale_blocked"))
}

func TestRunEmptyDirectory(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{t.TempDir()}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", &stderr)
	require.Zero(t, num(t, summary(t, stdout.String()), "files"))
}

func TestRunMissingDirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	var stdout, stderr bytes.Buffer
	code := run([]string{missing}, &stdout, &stderr)
	require.NotZero(t, code)
	require.Contains(t, stderr.String(), missing)
	require.Contains(t, stderr.String(), "no such file or directory")
	require.Empty(t, stdout.String())
}

func TestRunRejectsBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-crash", "-0.1"}, "-crash"},
		{[]string{"-crash", "1.5"}, "-crash"},
		{[]string{"-crash", "NaN"}, "-crash"},
		{[]string{"-stall", "-1"}, "-stall"},
		{[]string{"-stall", "2"}, "-stall"},
		{[]string{"-lease", "0"}, "-lease"},
		{[]string{"-lease", "-1s"}, "-lease"},
		{[]string{"-workers", "0"}, "-workers"},
		{[]string{"-bogus"}, "bogus"},
		{[]string{"a", "b"}, "at most one directory"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append(tc.args, dir), &stdout, &stderr)
			require.Equal(t, 2, code)
			require.Contains(t, stderr.String(), tc.want)
			require.Empty(t, stdout.String())
		})
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Zero(t, run([]string{"-h"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "-stall")
}
