package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// consoleRun is the console subcommand running in the test.
type consoleRun struct {
	url    string // the URL it printed
	stop   context.CancelFunc
	done   chan result
	client *http.Client
}

// startConsole runs the console subcommand with args until stop, and
// returns once it printed its URL.
func startConsole(t *testing.T, d db, args ...string) *consoleRun {
	t.Helper()
	return startConsoleEnv(t, d, nil, args...)
}

// startConsoleEnv is startConsole with the environment variables vars
// set too.
func startConsoleEnv(t *testing.T, d db, vars map[string]string, args ...string) *consoleRun {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var errOut strings.Builder
	c := &consoleRun{stop: stop, done: make(chan result, 1), client: &http.Client{Transport: &http.Transport{}}}
	env := func(k string) string {
		if k == envURL {
			return d.url
		}
		return vars[k]
	}
	go func() {
		code := run(ctx, append([]string{"console", "--addr", "127.0.0.1:0"}, args...), env, pw, &errOut)
		pw.Close()
		c.done <- result{code: code, stderr: errOut.String()}
	}()
	t.Cleanup(func() {
		stop()
		<-c.done
		c.client.CloseIdleConnections()
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err, "the console printed nothing: %s", errOut.String())
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	m := regexp.MustCompile(`^console: (http://127\.0\.0\.1:\d+/) `).FindStringSubmatch(line)
	require.NotNil(t, m, line)
	c.url = m[1]
	return c
}

func (c *consoleRun) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := c.client.Get(c.url + path)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func (c *consoleRun) post(t *testing.T, form url.Values) int {
	t.Helper()
	res, err := c.client.PostForm(c.url+"action", form)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}

// TestConsoleServesEveryQueueUntilStopped: the console shows every queue
// of the database, answers /healthz and acts on jobs; once its ctx ends
// it shuts down (exit status 0, its Routers closed: TestMain checks no
// goroutine is left) and stops answering.
func TestConsoleServesEveryQueueUntilStopped(t *testing.T) {
	d := newDB(t)
	mail, files := d.router(t, "mail"), d.router(t, "files")
	kill(t, mail, "welcome-42", "smtp: 550")
	enqueue(t, files, "img-1.png")

	c := startConsole(t, d)
	code, page := c.get(t, "")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "mail")
	require.Contains(t, page, "files")
	code, page = c.get(t, "healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", strings.TrimSpace(page))
	code, page = c.get(t, "dead?queue=mail")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "welcome-42")

	require.Equal(t, http.StatusOK, c.post(t, url.Values{"queue": {"mail"}, "id": {"welcome-42"}, "action": {"retry"}}))
	require.Equal(t, leaserouter.StatePending, job(t, mail, "welcome-42").State, "retried from the console")

	c.stop()
	res := <-c.done
	c.done <- res // for the cleanup
	require.Equal(t, exitOK, res.code, res.stderr)
	_, err := c.client.Get(c.url + "healthz")
	require.Error(t, err, "stopped")
}

// TestConsoleReadOnlyRefusesActions: --read-only refuses actions (403)
// and changes nothing; an empty database shows the default queue.
func TestConsoleReadOnlyRefusesActions(t *testing.T) {
	d := newDB(t)
	c := startConsole(t, d, "--read-only")
	code, page := c.get(t, "")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, pgrouter.DefaultQueue)

	r := d.router(t, pgrouter.DefaultQueue)
	kill(t, r, "dead", "boom")
	before := job(t, r, "dead")
	require.Equal(t, http.StatusForbidden, c.post(t, url.Values{"queue": {pgrouter.DefaultQueue}, "id": {"dead"}, "action": {"retry"}}))
	require.Equal(t, before, job(t, r, "dead"), "nothing changed")
}

// TestConsoleAddressInUse: a listen failure is an operation error, its
// Routers closed.
func TestConsoleAddressInUse(t *testing.T) {
	d := newDB(t)
	c := startConsole(t, d)
	addr := strings.TrimSuffix(strings.TrimPrefix(c.url, "http://"), "/")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	code := run(ctx, []string{"console", "--addr", addr, "--database-url", d.url}, func(string) string { return "" }, &out, &errOut)
	require.Equal(t, exitError, code)
	require.Contains(t, errOut.String(), "address already in use")
}

// TestConsoleStopsOnSIGINT: the command, as a process, shuts the console
// down on SIGINT and exits with status 0.
func TestConsoleStopsOnSIGINT(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT can be sent to a process on Windows")
	}
	d := newDB(t)
	cmd := exec.Command(os.Args[0], "console", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), envMain+"=1", envURL+"="+d.url)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, errOut.String())
	m := regexp.MustCompile(`^console: (http://127\.0\.0\.1:\d+/) `).FindStringSubmatch(line)
	require.NotNil(t, m, line)
	c := &consoleRun{url: m[1], client: &http.Client{Transport: &http.Transport{}}}
	defer c.client.CloseIdleConnections()
	code, body := c.get(t, "healthz")
	require.Equal(t, http.StatusOK, code, body)

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), "exit status 0 after SIGINT: %s", errOut.String())
	require.Empty(t, errOut.String())
}
