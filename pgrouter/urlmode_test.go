package pgrouter_test

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// Tests of this package run in a test process of their own against a
// server named by LEASEROUTER_TEST_DATABASE_URL (a cluster of the
// test's own standing in for a shared server), as on a machine without
// throwaway clusters.

// proxyTests are the tests that reach the server through a fault proxy.
var proxyTests = []string{
	"TestAcquireHonoursCtxWithServerStalled",
	"TestClaimWithLostReplyCountsNoAttempt",
	"TestClaimWithLostReplyCountsNoAttemptAfterExpiry",
	"TestCutOperationNeverReachingServerTakesNoEffect",
	"TestUnknownCommitOutcome",
	"TestUnknownOutcomeResolutionHonoursCtx",
	"TestCloseHonoursCtxWithServerStalled",
	"TestCloseReturnsWhenItsCtxEndsWithBackgroundWork",
	"TestRunCompletesAfterCloseRevocationFailed",
	"TestRunReturnsPromptlyAfterCtxWithServerStalled",
}

// TestFaultProxiesReachAServerAtTheURLOverTCP: with
// LEASEROUTER_TEST_DATABASE_URL naming a server over TCP, with pgx's
// default sslmode (prefer: TLS if the server offers it, else the
// clear), the tests through the stall, cut and hold proxies pass: the
// proxies dial the server as the pool does, not a Unix socket, and the
// pool through a proxy never falls back to the server itself.
func TestFaultProxiesReachAServerAtTheURLOverTCP(t *testing.T) {
	c := pgtest.NewCluster(t)
	url := "postgres://postgres@" + tcpTo(t, c) + "/postgres"
	out := runInURLMode(t, url, "^("+strings.Join(proxyTests, "|")+")$")
	for _, name := range proxyTests {
		require.Contains(t, out, "--- PASS: "+name+" ", "%s", out)
	}
	require.NotContains(t, out, "--- SKIP", "%s", out)
}

// TestVacuumOwnerTestSkipsWithoutCREATEROLEAndLeavesNoRole: at
// LEASEROUTER_TEST_DATABASE_URL, TestVacuumOnlyByTheOwner (which makes a
// role) is skipped, saying why, for a role that may only create
// databases, as the README asks of it; it runs for one that may create
// roles, and for a superuser; and it leaves no role on the server.
func TestVacuumOwnerTestSkipsWithoutCREATEROLEAndLeavesNoRole(t *testing.T) {
	c := pgtest.NewCluster(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	_, err = admin.Exec(ctx, "CREATE ROLE tester LOGIN CREATEDB; CREATE ROLE creator LOGIN CREATEDB CREATEROLE")
	require.NoError(t, err)

	const run = "^TestVacuumOnlyByTheOwner$"
	out := runInURLMode(t, c.URL("postgres")+" user=tester", run)
	require.Contains(t, out, "--- SKIP: TestVacuumOnlyByTheOwner ", "%s", out)
	require.Contains(t, out, "CREATEROLE", "%s", out)
	for _, user := range []string{"creator", "postgres"} {
		out := runInURLMode(t, c.URL("postgres")+" user="+user, run)
		require.Contains(t, out, "--- PASS: TestVacuumOnlyByTheOwner ", "%s", out)
	}
	rows, err := admin.Query(ctx, `SELECT rolname FROM pg_roles WHERE rolname NOT IN ('tester', 'creator') AND rolname !~ '^pg_' AND NOT rolsuper`)
	require.NoError(t, err)
	roles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, roles, "roles left on the server")
}

// runInURLMode runs this test binary's tests matching run in a test
// process of its own, against the server at url
// (LEASEROUTER_TEST_DATABASE_URL; LEASEROUTER_REQUIRE_POSTGRES=1), and
// returns its verbose output; the process failing fails t.
func runInURLMode(t *testing.T, url, run string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+run, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), pgtest.EnvURL+"="+url, pgtest.EnvRequire+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the tests in URL mode: %s", out)
	return string(out)
}

// tcpTo returns a TCP address, 127.0.0.1:port, whose connections are
// forwarded to c's server (on a Unix socket), until t ends: c as a
// server reached over TCP.
func tcpTo(t *testing.T, c *pgtest.Cluster) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(c.URL("postgres"))
	require.NoError(t, err)
	network, address := pgconn.NetworkAddress(cfg.Host, cfg.Port)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := cfg.DialFunc(context.Background(), network, address)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(s, c); s.Close() })
			wg.Go(func() { _, _ = io.Copy(c, s); c.Close() })
		}
	})
	return ln.Addr().String()
}
