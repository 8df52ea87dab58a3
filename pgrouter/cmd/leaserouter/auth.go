package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// The console's login: basic auth (a user and a password) and/or a
// bearer token. Secrets come from the environment or a file, never from
// a flag: a command line is visible to every user of the machine (ps).
const (
	envConsoleUser     = "LEASEROUTER_CONSOLE_USER"
	envConsolePassword = "LEASEROUTER_CONSOLE_PASSWORD"
	envConsoleToken    = "LEASEROUTER_CONSOLE_TOKEN"
)

// consoleAuth is who may use the console: a request is let through when
// it carries the user and password (basic auth) or the token
// ("Authorization: Bearer TOKEN"), whichever are set. The zero value
// lets every request through.
type consoleAuth struct {
	user, password, token string
}

// set reports whether any login is asked for.
func (a consoleAuth) set() bool { return a.user != "" || a.token != "" }

// readConsoleAuth reads the login of o: the user (--user, else
// $LEASEROUTER_CONSOLE_USER), the password ($LEASEROUTER_CONSOLE_PASSWORD,
// else the first line of --password-file) and the token
// ($LEASEROUTER_CONSOLE_TOKEN, else the first line of --token-file). A
// user without a password, or a password without a user, is a usage
// error; so is listening on an address that is not loopback without a
// login, unless --insecure-no-auth says so.
func readConsoleAuth(o *opts, env func(string) string) (consoleAuth, error) {
	a := consoleAuth{user: o.user, password: env(envConsolePassword), token: env(envConsoleToken)}
	if a.user == "" {
		a.user = env(envConsoleUser)
	}
	var err error
	if a.password == "" && o.passwordFile != "" {
		if a.password, err = firstLine(o.passwordFile); err != nil {
			return a, usagef("--password-file: %v", err)
		}
	}
	if a.token == "" && o.tokenFile != "" {
		if a.token, err = firstLine(o.tokenFile); err != nil {
			return a, usagef("--token-file: %v", err)
		}
	}
	switch {
	case a.user != "" && a.password == "":
		return a, usagef("a console user (%q) needs a password: set $%s or pass --password-file", a.user, envConsolePassword)
	case a.user == "" && a.password != "":
		return a, usagef("a console password needs a user: pass --user or set $%s", envConsoleUser)
	case !a.set() && !o.insecureNoAuth && !loopback(o.addr):
		return a, usagef("refusing to serve the console on %s, beyond this machine, without a login: set --user and $%s "+
			"(basic auth) or $%s (a bearer token), or pass --insecure-no-auth if something in front of it authenticates",
			o.addr, envConsolePassword, envConsoleToken)
	}
	return a, nil
}

// firstLine is the first line of the file at path, without its line end;
// an empty one is an error.
func firstLine(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if line = strings.TrimSuffix(line, "\r"); line == "" {
		return "", fmt.Errorf("%s: the first line is empty", path)
	}
	return line, nil
}

// loopback reports whether addr (host:port) listens on this machine
// only: a loopback IP or "localhost". Every other host, an empty one
// (every interface) included, is reachable from elsewhere.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// wrap returns h behind a's login: a request without it gets 401 and a
// challenge for basic auth (when a user is set), every page, action,
// asset and the health endpoint alike.
func (a consoleAuth) wrap(h http.Handler) http.Handler {
	if !a.set() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.allows(r) {
			h.ServeHTTP(w, r)
			return
		}
		if a.user != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="leaserouter console", charset="UTF-8"`)
		}
		http.Error(w, "401 unauthorized: the console asks for a login", http.StatusUnauthorized)
	})
}

// allows reports whether r carries the login. Every comparison takes the
// same time whatever the secrets and however much of them matches
// (sums compared in constant time), so timing tells nothing of them.
func (a consoleAuth) allows(r *http.Request) bool {
	ok := false
	if a.token != "" {
		// The scheme's name is case-insensitive (RFC 7235).
		if scheme, bearer, found := strings.Cut(r.Header.Get("Authorization"), " "); found && strings.EqualFold(scheme, "Bearer") {
			ok = equal(bearer, a.token)
		}
	}
	if a.user != "" {
		if u, p, found := r.BasicAuth(); found {
			userOK, passOK := equal(u, a.user), equal(p, a.password) // both, always
			ok = ok || userOK && passOK
		}
	}
	return ok
}

// equal compares a and b in constant time, whatever their lengths (their
// SHA-256 sums are compared).
func equal(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}
