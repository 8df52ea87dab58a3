//go:build unix

package pgtest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// envOwnerChild makes TestOwnerChild run, and says how it ends.
const envOwnerChild = "PGTEST_OWNER_CHILD"

// TestURLModeDropsWhatEndedProcessesLeftAndNothingOfLiveOnes: with
// LEASEROUTER_TEST_DATABASE_URL naming a server shared by test processes
// (here a cluster of the test's own, as a role that may only create
// databases), a process that panics, times out (go test -timeout) or is
// killed leaves its template and open test databases there, and the
// next test process to use the server drops them; the databases of a
// process still running there are kept.
func TestURLModeDropsWhatEndedProcessesLeftAndNothingOfLiveOnes(t *testing.T) {
	c := NewCluster(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	_, err = admin.Exec(ctx, "CREATE ROLE tester LOGIN CREATEDB")
	require.NoError(t, err)
	url := c.URL("postgres") + " user=tester"

	left := func() []string {
		rows, err := admin.Query(ctx, `SELECT datname FROM pg_database
			WHERE datname LIKE 'leaserouter\_template\_%' OR datname LIKE 'leaserouter\_test\_%'
			EXCEPT SELECT 'leaserouter_template' -- the cluster's own
			ORDER BY 1`)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	child := func(mode, timeout string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOwnerChild$", "-test.timeout="+timeout)
		cmd.Env = append(os.Environ(), envOwnerChild+"="+mode, EnvURL+"="+url)
		return cmd
	}
	run := func(mode, timeout string) {
		cmd := child(mode, timeout)
		out, err := cmd.CombinedOutput()
		t.Logf("child (%s) ended: %v\n%.400s", mode, err, out)
		if mode == "ok" {
			require.NoError(t, err, "%s", out)
		}
	}

	// A live process: it has made its template and a test's database,
	// and waits.
	live := child("hang", "10m")
	live.Stderr = os.Stderr
	out, err := live.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, live.Start())
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	ready, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the live child printed nothing")
	require.True(t, strings.HasPrefix(ready, "ready "), ready)
	liveDBs := left()
	require.Len(t, liveDBs, 2, "the live child's template and test database")

	run("panic", "10m")
	require.Subset(t, left(), liveDBs, "the live child's databases are kept by a process starting")
	run("hang", "5s") // ends in go test -timeout's panic
	ended := left()
	require.Greater(t, len(ended), len(liveDBs), "the ended children left their databases: %v", ended)

	run("ok", "10m") // the next process
	require.Equal(t, liveDBs, left(), "what the ended children left is dropped, the live child's kept")

	require.NoError(t, live.Process.Kill())
	_ = live.Wait()
	run("ok", "10m")
	require.Empty(t, left(), "what the killed child left is dropped")
}

// TestOwnerChild, run by
// TestURLModeDropsWhatEndedProcessesLeftAndNothingOfLiveOnes, takes a
// database at LEASEROUTER_TEST_DATABASE_URL and ends as
// PGTEST_OWNER_CHILD says: "ok" passes, "panic" panics, "hang" prints
// "ready" and waits (for a kill, or go test -timeout).
func TestOwnerChild(t *testing.T) {
	mode := os.Getenv(envOwnerChild)
	if mode == "" {
		t.Skip("run by TestURLModeDropsWhatEndedProcessesLeftAndNothingOfLiveOnes")
	}
	db := New(t)
	switch mode {
	case "panic":
		panic("a test's bug")
	case "hang":
		os.Stdout.WriteString("ready " + db.Config().ConnConfig.Database + "\n")
		select {}
	}
}
