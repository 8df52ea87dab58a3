package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the tests if a worker outlives run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// makeTree writes n Go files, file i with i%5 functions of which i%3 are
// exported (at most), over nested folders, plus a testdata folder and a
// file that does not parse, and returns the root.
func makeTree(t *testing.T, n int) string {
	t.Helper()
	root := t.TempDir()
	for i := range n {
		d := filepath.Join(root, fmt.Sprintf("p%d", i%4), fmt.Sprintf("q%d", i%3))
		require.NoError(t, os.MkdirAll(d, 0o755))
		var b strings.Builder
		b.WriteString("package q\n")
		for f := range i % 5 {
			name := fmt.Sprintf("f%d", f)
			if f < i%3 {
				name = fmt.Sprintf("F%d", f)
			}
			fmt.Fprintf(&b, "func %s() {}\n", name)
		}
		require.NoError(t, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.go", i)), []byte(b.String()), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "testdata"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "testdata", "skipped.go"), []byte("package x\nfunc A() {}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "broken.go"), []byte("package\n"), 0o644))
	return root
}

// summary parses the "service: k=v ..." line of out.
func summary(t *testing.T, out string) map[string]string {
	t.Helper()
	line := strings.TrimSpace(out)
	require.True(t, strings.HasPrefix(line, "service: "), "no summary line in %q", out)
	kv := map[string]string{}
	for _, f := range strings.Fields(strings.TrimPrefix(line, "service: ")) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	return kv
}

// TestEveryFileSurveyedDespiteFailedAttempts: with a third of the
// attempts failed by the middleware, every file of every kind's jobs is
// still in the results, right, and the counts are the tree's: a scan's
// follow-ups reach the other queue, Drained waits for them, retries run.
func TestEveryFileSurveyedDespiteFailedAttempts(t *testing.T) {
	root := makeTree(t, 60)
	var out, errOut bytes.Buffer
	code := run([]string{"-fail", "0.3", "-io", "4", "-cpu", "2", root}, &out, &errOut)
	require.Equal(t, 0, code, "stderr: %s", errOut.String())
	s := summary(t, out.String())
	require.Equal(t, "61", s["files"], "60 files and the broken one; testdata skipped")
	require.Equal(t, "17", s["dirs"], "the root, 4 p folders, 12 q folders; testdata skipped")
	funcs, exported := 0, 0
	for i := range 60 {
		funcs += i % 5
		exported += min(i%3, i%5)
	}
	require.Equal(t, fmt.Sprint(funcs), s["funcs"])
	require.Equal(t, fmt.Sprint(exported), s["exported"])
	require.Equal(t, "0", s["lost"])
	require.Equal(t, "0", s["mismatches"])
	require.NotEqual(t, "0", s["failed_attempts"], "a third of the attempts failed: retries ran")
	require.Contains(t, s["attempts"], "parse:")
	require.Contains(t, s["attempts"], "checksum:")
}

// TestLostFileReported: a result missing from the survey is reported
// lost, with exit status 1 (the check the summary's lost=0 rests on).
func TestLostFileReported(t *testing.T) {
	root := makeTree(t, 3)
	s := &survey{files: map[string]*facts{}}
	var out, errOut bytes.Buffer
	require.Equal(t, 1, s.report(config{root: root}, 0, &out, &errOut))
	require.Equal(t, "4", summary(t, out.String())["lost"])
	require.Contains(t, errOut.String(), "service: lost ")
}

// TestBadUsage: bad flags exit 2 with a message, -h exits 0.
func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{{"-fail", "0.9"}, {"-io", "0"}, {"a", "b"}} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errOut), "%v", args)
		require.Contains(t, errOut.String(), "service: ", "%v", args)
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &out, &errOut))
	require.Equal(t, 1, run([]string{filepath.Join(t.TempDir(), "missing")}, &out, &errOut))
}
