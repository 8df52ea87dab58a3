package main

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
)

// do sends a request to the console with the login set by login (nil:
// none) and returns its status and its WWW-Authenticate header.
func (c *consoleRun) do(t *testing.T, method, path string, form url.Values, login func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, c.url+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if login != nil {
		login(req)
	}
	res, err := c.client.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode, res.Header.Get("WWW-Authenticate")
}

func basic(user, pass string) func(*http.Request) {
	return func(r *http.Request) { r.SetBasicAuth(user, pass) }
}

func bearer(token string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
}

// TestConsoleBasicAuth: with --user and $LEASEROUTER_CONSOLE_PASSWORD,
// every page, asset and the health endpoint answer 401 (with a basic auth
// challenge) without the login or with a wrong one, and 200 with it; with
// --read-only too, an action with the login is still refused (403) and
// changes nothing.
func TestConsoleBasicAuth(t *testing.T) {
	d := newDB(t)
	r := d.router(t, pgrouter.DefaultQueue)
	kill(t, r, "dead", "boom")
	c := startConsoleEnv(t, d, map[string]string{envConsolePassword: "s3cret pass"}, "--user", "ops", "--read-only")
	for _, path := range []string{"", "jobs", "leases", "healthz", "static/console.css"} {
		code, challenge := c.do(t, http.MethodGet, path, nil, nil)
		require.Equal(t, http.StatusUnauthorized, code, path)
		require.Contains(t, challenge, `Basic realm="leaserouter console"`)
		code, _ = c.do(t, http.MethodGet, path, nil, basic("ops", "wrong"))
		require.Equal(t, http.StatusUnauthorized, code, "%s: a wrong password", path)
		code, _ = c.do(t, http.MethodGet, path, nil, basic("root", "s3cret pass"))
		require.Equal(t, http.StatusUnauthorized, code, "%s: a wrong user", path)
		code, _ = c.do(t, http.MethodGet, path, nil, basic("ops", "s3cret pass"))
		require.Equal(t, http.StatusOK, code, path)
	}
	before := job(t, r, "dead")
	retry := url.Values{"queue": {pgrouter.DefaultQueue}, "id": {"dead"}, "action": {"retry"}}
	code, _ := c.do(t, http.MethodPost, "action", retry, nil)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = c.do(t, http.MethodPost, "action", retry, basic("ops", "s3cret pass"))
	require.Equal(t, http.StatusForbidden, code, "--read-only refuses the action")
	require.Equal(t, before, job(t, r, "dead"), "nothing changed")
}

// TestConsoleBearerToken: with a token (from --token-file here), a
// request with "Authorization: Bearer TOKEN" is let through, one without
// or with another token is 401 (no basic auth challenge: no user is
// set), and an action with the token runs.
func TestConsoleBearerToken(t *testing.T) {
	d := newDB(t)
	r := d.router(t, pgrouter.DefaultQueue)
	kill(t, r, "dead", "boom")
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte("tok-123\n"), 0o600))
	c := startConsoleEnv(t, d, nil, "--token-file", file)
	code, challenge := c.do(t, http.MethodGet, "", nil, nil)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Empty(t, challenge)
	code, _ = c.do(t, http.MethodGet, "", nil, bearer("tok-12"))
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = c.do(t, http.MethodGet, "", nil, bearer("tok-123"))
	require.Equal(t, http.StatusOK, code)
	code, _ = c.do(t, http.MethodGet, "", nil, func(r *http.Request) { r.Header.Set("Authorization", "bearer tok-123") })
	require.Equal(t, http.StatusOK, code, "the scheme's name is case-insensitive")
	retry := url.Values{"queue": {pgrouter.DefaultQueue}, "id": {"dead"}, "action": {"retry"}}
	code, _ = c.do(t, http.MethodPost, "action", retry, bearer("tok-123"))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "pending", job(t, r, "dead").State.String())
}

// TestConsoleLoginRules: an address beyond loopback without a login is
// refused (exit status 2, saying how to set one) unless
// --insecure-no-auth; a user without a password, or a password without a
// user, is refused too. None of these reaches the database.
func TestConsoleLoginRules(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		msg  string
	}{
		{[]string{"--addr", "0.0.0.0:0"}, nil, "without a login"},
		{[]string{"--addr", ":8080"}, nil, "without a login"},
		{[]string{"--addr", "192.0.2.7:8080"}, nil, "without a login"},
		{[]string{"--user", "ops"}, nil, "needs a password"},
		{nil, map[string]string{envConsolePassword: "x"}, "needs a user"},
		{[]string{"--token-file", "/nonexistent/token"}, nil, "--token-file"},
	} {
		var out, errOut strings.Builder
		env := func(k string) string {
			if k == envURL {
				return "postgres://nowhere.invalid/db"
			}
			return c.env[k]
		}
		code := run(t.Context(), append([]string{"console"}, c.args...), env, &out, &errOut)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut.String())
		require.Contains(t, errOut.String(), c.msg, c.args)
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:80": true, "[::1]:80": true, "localhost:80": true, "127.3.4.5:0": true,
		"0.0.0.0:80": false, ":80": false, "[::]:80": false, "10.0.0.1:80": false, "example.com:80": false, "bad": false,
	} {
		require.Equal(t, want, loopback(addr), addr)
	}
	_, err := readConsoleAuth(&opts{addr: "0.0.0.0:0", insecureNoAuth: true}, func(string) string { return "" })
	require.NoError(t, err, "--insecure-no-auth: an address beyond loopback without a login")
}
