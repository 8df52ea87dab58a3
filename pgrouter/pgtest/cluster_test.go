//go:build unix

package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestClusterStopStart: a cluster of the test's own stops (fast or as a
// crash) and starts again with its data; so does one whose server is
// watched by a watchdog (as on macOS), a new watchdog at each start.
func TestClusterStopStart(t *testing.T) {
	t.Run("default", func(t *testing.T) { stopStart(t, NewCluster(t)) })
	t.Run("watchdog", func(t *testing.T) {
		if bindir() == "" {
			need(t, errNoServer)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := startCluster(ctx, true)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, c.migrateTemplate(ctx))
		stopStart(t, c)
	})
}

func stopStart(t *testing.T, c *Cluster) {
	db := c.Pool(t)
	ctx := context.Background()
	_, err := db.Exec(ctx, "INSERT INTO leaserouter_fences VALUES ('k', 7)")
	require.NoError(t, err)
	for _, crash := range []bool{false, true} {
		require.NoError(t, c.Stop(crash))
		require.Error(t, db.Ping(ctx), "down")
		require.NoError(t, c.Start(ctx))
		var tok int64
		require.NoError(t, db.QueryRow(ctx, "SELECT token FROM leaserouter_fences WHERE key = 'k'").Scan(&tok))
		require.EqualValues(t, 7, tok)
	}
}

// TestSweepRemovesDeadProcessesDirs: a directory left by a test process
// that is gone is removed; one of a live process is kept.
func TestSweepRemovesDeadProcessesDirs(t *testing.T) {
	dead, err := os.MkdirTemp(tempBase(), dirPrefix+"999999999-")
	require.NoError(t, err)
	live, err := os.MkdirTemp(tempBase(), dirPrefix+fmt.Sprint(os.Getppid())+"-")
	require.NoError(t, err)
	defer os.RemoveAll(live)
	sweep()
	_, err = os.Stat(dead)
	require.True(t, os.IsNotExist(err), "dead process's directory kept")
	_, err = os.Stat(filepath.Join(live))
	require.NoError(t, err, "live process's directory removed")
}

// TestServerAtTheURLGivesEachTestAFreshDatabaseClonedFromOneTemplate:
// with LEASEROUTER_TEST_DATABASE_URL naming a server (here a cluster of
// the test's own, as a role that may only create databases), each New is
// a fresh migrated database of that server, as that role, collated C
// whatever the server's default, cloned from one template the process
// migrated there; Main's dropTemplate drops it.
func TestServerAtTheURLGivesEachTestAFreshDatabaseClonedFromOneTemplate(t *testing.T) {
	c := NewCluster(t)
	ctx := context.Background()
	admin := c.Pool(t)
	_, err := admin.Exec(ctx, "CREATE ROLE tester LOGIN CREATEDB")
	require.NoError(t, err)
	// A server whose default collation is not C, as a container's.
	_, err = admin.Exec(ctx, "UPDATE pg_database SET datcollate = 'C.UTF-8', datctype = 'C.UTF-8' WHERE datname = 'template1'")
	require.NoError(t, err)
	url := c.URL("postgres") + " user=tester" // the last user= wins
	t.Setenv(EnvURL, url)
	t.Cleanup(func() { _ = dropTemplate(url) }) // before the cluster's Close

	a, b := New(t), New(t)
	_, err = a.Exec(ctx, "INSERT INTO leaserouter_fences VALUES ('k', 1)")
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM leaserouter_fences").Scan(&n), "migrated")
	require.Zero(t, n, "a's row is not in b")
	var names []string
	for _, db := range []*pgxpool.Pool{a, b} {
		var name, user, collate string
		require.NoError(t, db.QueryRow(ctx, `SELECT current_database(), current_user, datcollate
			FROM pg_database WHERE datname = current_database()`).Scan(&name, &user, &collate))
		require.Equal(t, "tester", user)
		require.Equal(t, "C", collate, "as on a throwaway cluster")
		names = append(names, name)
		conn, err := pgx.Connect(ctx, db.Config().ConnString())
		require.NoError(t, err)
		var same string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&same))
		require.NoError(t, conn.Close(ctx))
		require.Equal(t, name, same, "the pool's connection string names its database")
	}
	require.NotEqual(t, names[0], names[1])
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = ANY($1)", names).Scan(&n))
	require.Equal(t, 2, n, "databases of the server at the URL")

	templates := func() []string {
		rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'leaserouter\\_template\\_%' ORDER BY 1")
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	require.Len(t, templates(), 1, "one template for the process, cloned for each test")
	require.NoError(t, dropTemplate(url))
	require.Empty(t, templates(), "dropped by Main")
}

// TestWatchdogEndsTheServerWhenTheTestProcessIsKilled: a cluster whose
// server is watched by a watchdog (as on macOS, with no parent-death
// signal) is shut down when its test process is SIGKILLed. The test
// process is this binary run again (TestWatchdogChild).
func TestWatchdogEndsTheServerWhenTheTestProcessIsKilled(t *testing.T) {
	if bindir() == "" {
		need(t, errNoServer)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestWatchdogChild$")
	child.Env = append(os.Environ(), envWatchdogChild+"=1")
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	var pid int
	var dir string
	_, err = fmt.Fscanf(out, "server %d %s\n", &pid, &dir)
	if err != nil {
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatalf("the child printed no server: %v", err)
	}
	require.True(t, alive(pid), "the server runs")
	t.Cleanup(func() { // should the watchdog have failed
		if !exited(pid) {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	})
	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	// Real time: the watchdog and the server are processes of their
	// own. Their shutdown takes well under a second; a minute is
	// generous on a busy machine.
	deadline := time.Now().Add(time.Minute)
	for !exited(pid) {
		require.True(t, time.Now().Before(deadline), "the server (pid %d) outlived its test process by a minute", pid)
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, os.RemoveAll(dir))
}

// envWatchdogChild makes TestWatchdogChild run.
const envWatchdogChild = "PGTEST_WATCHDOG_CHILD"

// TestWatchdogChild, run by
// TestWatchdogEndsTheServerWhenTheTestProcessIsKilled, starts a cluster
// watched by a watchdog, not the parent-death signal, prints its server's
// pid and directory, and waits to be killed.
func TestWatchdogChild(t *testing.T) {
	if os.Getenv(envWatchdogChild) != "1" {
		t.Skip("run by TestWatchdogEndsTheServerWhenTheTestProcessIsKilled")
	}
	c, err := startCluster(context.Background(), true)
	require.NoError(t, err)
	fmt.Printf("server %d %s\n", c.cmd.Process.Pid, c.dir)
	select {}
}

// exited reports whether process pid has exited (a zombie has: it only
// waits for its parent, here whatever adopted it, to reap it).
func exited(pid int) bool {
	out, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output()
	return err != nil || strings.HasPrefix(strings.TrimSpace(string(out)), "Z")
}

// TestBinDirVersions: the newest install is chosen by the major version
// in its directory's name, whichever package put it there.
func TestBinDirVersions(t *testing.T) {
	for dir, want := range map[string]int{
		"/usr/lib/postgresql/15/bin":                              15,
		"/usr/pgsql-16/bin":                                       16,
		"/opt/homebrew/opt/postgresql@14/bin":                     14,
		"/Applications/Postgres.app/Contents/Versions/17/bin":     17,
		"/Applications/Postgres.app/Contents/Versions/latest/bin": 0,
	} {
		require.Equal(t, want, version(dir), dir)
	}
}
