package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the tests if a worker, the server or the router outlives run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func makeTree(t *testing.T, n int) string {
	t.Helper()
	root := t.TempDir()
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("d%d", i%5))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		data := strings.Repeat(fmt.Sprintf("line %d\n", i), i%40)
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", i)), []byte(data), 0o644))
	}
	return root
}

// TestRunServesTheConsole runs the example briefly and reads its console
// over HTTP while the workload runs: the overview shows the queue, a job
// page answers, and run exits 0 by itself when -duration has passed.
func TestRunServesTheConsole(t *testing.T) {
	root := makeTree(t, 60)
	out, outW := io.Pipe()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		defer outW.Close()
		done <- run(context.Background(), []string{"-duration", "3s", "-lease", "200ms", "-workers", "3", root}, outW, &stderr)
	}()
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "no URL printed; stderr: %s", &stderr)
	url, ok := strings.CutPrefix(lines.Text(), "console: ")
	require.True(t, ok, "first line %q", lines.Text())
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), url)

	client := &http.Client{Timeout: 30 * time.Second}
	fetch := func(u string) string {
		resp, err := client.Get(u)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", u, body)
		return string(body)
	}
	body := fetch(url)
	require.Contains(t, body, `data-testid="queue-card" data-queue="fileindex"`)
	require.Contains(t, body, "<title>Overview · fileindex</title>")
	require.Contains(t, fetch(url+"jobs?queue=fileindex&prefix=r1/d1/"), `data-id="r1/d1/f001.txt"`)
	require.Contains(t, fetch(url+"job?queue=fileindex&id=r1/d1/f001.txt"), `&#34;path&#34;: &#34;d1/f001.txt&#34;`)
	require.Equal(t, "ok\n", fetch(url+"healthz"))

	var rest strings.Builder
	for lines.Scan() {
		rest.WriteString(lines.Text() + "\n")
	}
	require.Equal(t, 0, <-done, "stderr: %s", &stderr)
	require.Contains(t, rest.String(), "fileindex-console: rounds=")
}

func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{{"-crash", "2"}, {"-duration", "0s"}, {"-lease", "1ms"}, {"-workers", "0"}, {"a", "b"}} {
		var stderr strings.Builder
		require.Equal(t, 2, run(context.Background(), args, io.Discard, &stderr), "%v", args)
		require.NotEmpty(t, stderr.String())
	}
}
