package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/gosource"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestMain runs the worker processes the fleet starts from this test
// binary.
func TestMain(m *testing.M) {
	if os.Getenv(envWorker) == "1" {
		os.Exit(worker(os.Stderr))
	}
	os.Exit(pgtest.Main(m))
}

// testDatabase points the fleet at a fresh database of pgtest's (the
// server at LEASEROUTER_TEST_DATABASE_URL, or a throwaway cluster),
// whatever LEASEROUTER_DATABASE_URL names: the fleet drops and empties
// its tables there.
func testDatabase(t *testing.T) {
	t.Setenv(envURL, pgtest.New(t).Config().ConnString())
}

// ownCluster points the fleet at a throwaway cluster of its own, which
// it may crash and start again, and reports true; with
// LEASEROUTER_TEST_DATABASE_URL set, at a database of pgtest's there
// (testDatabase), reporting false. Never at what
// LEASEROUTER_DATABASE_URL names.
func ownCluster(t *testing.T) bool {
	if os.Getenv(pgtest.EnvURL) != "" {
		testDatabase(t)
		return false
	}
	t.Setenv(envURL, "")
	return true
}

func goSrc(t *testing.T) string {
	src, err := gosource.Dir()
	require.NoError(t, err)
	return src
}

// TestFleet: worker processes killed with SIGKILL and stalling past their
// leases still index every file exactly right, and the database refuses
// the stale writes.
func TestFleet(t *testing.T) {
	if !canPause {
		t.Skip("the stale writes come from paused worker processes (SIGSTOP): Unix only")
	}
	own := ownCluster(t)
	cfg := config{
		root:  filepath.Join(goSrc(t), "crypto"),
		procs: 4, kill: 100 * time.Millisecond, pause: 150 * time.Millisecond, lease: 300 * time.Millisecond, restart: true,
	}
	var log bytes.Buffer
	s, err := coordinate(cfg, &log)
	if errors.Is(err, pgtest.ErrNoPostgres) && os.Getenv(pgtest.EnvRequire) != "1" {
		t.Skip(err)
	}
	require.NoError(t, err, log.String())
	t.Logf("run: %+v", s)
	require.Greater(t, s.files, 100)
	require.Zero(t, s.lost, "lost files")
	require.Zero(t, s.mismatches, "wrong records")
	require.Positive(t, s.kills, "no worker process was killed")
	require.Positive(t, s.pauses, "no worker process was paused")
	if own {
		require.Equal(t, 1, s.restarts, "the fleet's throwaway server was crashed and started again")
	} else {
		require.Zero(t, s.restarts, "a server not the fleet's own is never restarted")
	}

	// Stale writes: a pause makes one only if a handler was in flight at
	// that instant (not while the server was down, nor at the idle end of
	// a run), so runs without the restart and with more pauses go on
	// until one is refused; five in a row without are very unlikely.
	cfg.restart, cfg.pause = false, 60*time.Millisecond
	refused := s.refused
	for i := 0; refused == 0 && i < 5; i++ {
		s, err = coordinate(cfg, &log)
		require.NoError(t, err, log.String())
		t.Logf("run: %+v", s)
		require.Zero(t, s.lost, "lost files")
		require.Zero(t, s.mismatches, "wrong records")
		refused += s.refused
	}
	require.Positive(t, refused, "no stale write was refused in six runs")
}

// TestFleetCommand: the command's summary line and exit status, the
// console it serves while it runs, and bad usage.
func TestFleetCommand(t *testing.T) {
	testDatabase(t)
	var out bytes.Buffer
	var errOut consoleProbe
	code := run([]string{"-procs", "2", "-kill", "0", "-pause", "0", "-lease", "1s", "-restart=false",
		filepath.Join(goSrc(t), "unicode", "utf8")}, &out, &errOut)
	if code != 0 && bytes.Contains(errOut.Bytes(), []byte(pgtest.ErrNoPostgres.Error())) && os.Getenv(pgtest.EnvRequire) != "1" {
		t.Skip(errOut.String())
	}
	require.Equal(t, 0, code, errOut.String())
	m := regexp.MustCompile(`files=(\d+) procs=2 killed=0 paused=0 server_restarts=0 stale_writes_refused=0 lost=0 mismatches=0`).FindSubmatch(out.Bytes())
	require.NotNil(t, m, out.String())
	n, _ := strconv.Atoi(string(m[1]))
	require.Positive(t, n)
	require.True(t, errOut.fetched, "the fleet printed its console's URL: %s", errOut.String())
	require.NoError(t, errOut.err, "the console's URL answers while the fleet runs")
	require.Equal(t, http.StatusOK, errOut.status, errOut.page)
	require.Contains(t, errOut.page, `<title>`)
	require.Contains(t, errOut.page, queue, "the overview shows the fleet's queue")

	for _, bad := range [][]string{{"-procs", "0"}, {"-pause", "-1s"}, {"-lease", "1ms"}, {"a", "b"}} {
		require.Equal(t, 2, run(bad, &out, &errOut), bad)
	}
}

// TestTheTestsLeaveTheDatabaseAtLEASEROUTER_DATABASE_URLAlone: with
// LEASEROUTER_DATABASE_URL exported (a developer's database, which the
// fleet's docs invite), the tests run the fleet on a database of their
// own: the tables of the fleet's names there are kept.
func TestTheTestsLeaveTheDatabaseAtLEASEROUTER_DATABASE_URLAlone(t *testing.T) {
	users := pgtest.New(t) // stands in for the developer's database
	_, err := users.Exec(t.Context(), `CREATE TABLE fleet_results (note text); INSERT INTO fleet_results VALUES ('mine')`)
	require.NoError(t, err)
	t.Setenv(envURL, users.Config().ConnString())
	for _, point := range []func(*testing.T){testDatabase, func(t *testing.T) { ownCluster(t) }} {
		point(t)
		var out, errOut bytes.Buffer
		code := run([]string{"-procs", "1", "-kill", "0", "-pause", "0", "-lease", "1s", "-restart=false",
			filepath.Join(goSrc(t), "unicode", "utf8")}, &out, &errOut)
		require.Equal(t, 0, code, errOut.String())
		rows, err := users.Query(t.Context(), "SELECT note FROM fleet_results")
		require.NoError(t, err)
		notes, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"mine"}, notes, "the fleet_results at %s", envURL)
		t.Setenv(envURL, users.Config().ConnString())
	}
}

// consoleProbe is the fleet's stderr: when the fleet prints its console's
// URL, it fetches the overview there and then (the fleet, running, waits
// for the write), and keeps what it got.
type consoleProbe struct {
	bytes.Buffer
	fetched bool
	status  int
	page    string
	err     error
}

var consoleLine = regexp.MustCompile(`console: (http://127\.0\.0\.1:\d+/)\n`)

func (p *consoleProbe) Write(b []byte) (int, error) {
	if m := consoleLine.FindSubmatch(b); m != nil && !p.fetched {
		p.fetched = true
		client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
		defer client.CloseIdleConnections()
		res, err := client.Get(string(m[1]))
		p.err = err
		if err == nil {
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			p.status, p.page, p.err = res.StatusCode, string(body), err
		}
	}
	return p.Buffer.Write(b)
}
