//go:build unix

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a throwaway PostgreSQL server: initdb into a temporary
// directory, the server listening only on a Unix socket in it. It is run
// as an unprivileged user when the test process is root (initdb refuses
// root), and it never outlives the test process, even one killed: it
// receives SIGQUIT (immediate shutdown) when the test process ends — on
// Linux from the kernel (the parent-death signal), on other Unix systems
// (macOS) from a watchdog process, a shell waiting on a pipe from the test
// process, which the system closes when the test process ends however it
// ends. A directory left by a killed process is removed by the next
// cluster started on the machine. On Windows there are no throwaway
// clusters: StartCluster returns an error wrapping ErrNoPostgres, and
// tests use the server at LEASEROUTER_TEST_DATABASE_URL. Methods are safe
// for concurrent use.
type Cluster struct {
	dir      string // the temporary directory: data/ and the socket
	bin      string // the server's binaries
	cred     *syscall.Credential
	watchdog bool // end the server from a watchdog process, not the parent-death signal

	mu      sync.Mutex
	running chan error // the server's exit, nil while stopped
	cmd     *exec.Cmd
}

// clusters: throwaway clusters can run on this system.
const clusters = true

// dirPrefix names a cluster's temporary directory: dirPrefix + pid + "-".
const dirPrefix = "leaserouter-pgtest-"

// installs are where PostgreSQL's server binaries are installed, by
// package: Debian's, the PGDG's RPMs, Homebrew's (Apple silicon and
// Intel; postgresql@15 is keg-only, not in $PATH), Postgres.app's.
var installs = []string{
	"/usr/lib/postgresql/*/bin",
	"/usr/pgsql-*/bin",
	"/opt/homebrew/opt/postgresql@*/bin",
	"/usr/local/opt/postgresql@*/bin",
	"/Applications/Postgres.app/Contents/Versions/*/bin",
}

// bindir finds the PostgreSQL server's binaries: $PG_BINDIR, then
// `pg_config --bindir`, then the newest of installs. It returns "" when
// none has initdb.
func bindir() string {
	var dirs []string
	if d := os.Getenv("PG_BINDIR"); d != "" {
		dirs = append(dirs, d)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	var found []string
	for _, pattern := range installs {
		m, _ := filepath.Glob(pattern)
		found = append(found, m...)
	}
	sort.SliceStable(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	dirs = append(dirs, found...)
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	return ""
}

// version is the major version in the name of a bin directory's parent
// (/usr/lib/postgresql/15/bin, /usr/pgsql-15/bin, .../postgresql@15/bin,
// .../Versions/15/bin); 0 when it has none (.../Versions/latest/bin).
func version(dir string) int {
	name := strings.TrimLeftFunc(filepath.Base(filepath.Dir(dir)), func(r rune) bool { return r < '0' || r > '9' })
	v, _ := strconv.Atoi(strings.SplitN(name, ".", 2)[0])
	return v
}

// StartCluster initdbs and starts a new cluster; Stop it when done (it
// also dies with the process). The server's binaries are found at
// $PG_BINDIR, else `pg_config --bindir`, else the newest of the places
// packages install them (Debian's /usr/lib/postgresql/*/bin, the PGDG's
// /usr/pgsql-*/bin, Homebrew's postgresql@*, Postgres.app). It returns an error wrapping ErrNoPostgres
// when no server binaries are found (always on Windows), and ctx's error
// if ctx ends before the server accepts connections. initdb takes about a
// second, the start a tenth.
func StartCluster(ctx context.Context) (*Cluster, error) {
	return startCluster(ctx, !parentDeathSignal)
}

// startCluster is StartCluster, with the server ended by a watchdog
// process instead of the parent-death signal if watchdog is set (as it
// must be where there is no such signal).
func startCluster(ctx context.Context, watchdog bool) (*Cluster, error) {
	bin := bindir()
	if bin == "" {
		return nil, errNoServer
	}
	sweep()
	dir, err := os.MkdirTemp(tempBase(), dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin, watchdog: watchdog}
	if os.Geteuid() == 0 {
		if c.cred, err = unprivileged(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", c.data(), "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %w: %s", err, out)
	}
	if err := c.Start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// installHint says how to get a server for the tests.
const installHint = "install PostgreSQL's server (apt-get install postgresql; brew install postgresql@15; " +
	"or Postgres.app, with its bin directory in $PATH or $PG_BINDIR), or set " + EnvURL + " to a server's URL"

// errNoServer is StartCluster's error when it finds no server binaries.
var errNoServer = fmt.Errorf("%w: no server binaries ($PG_BINDIR, `pg_config --bindir`, where packages install them); %s",
	ErrNoPostgres, installHint)

// findServer returns errNoServer when there are no server binaries.
func findServer() error {
	if bindir() == "" {
		return errNoServer
	}
	return nil
}

// tempBase is the directory clusters' directories are made in: the
// system's temporary directory, unless the server's socket in it would be
// longer than a Unix socket's path may be (104 bytes on macOS, whose
// $TMPDIR is long), then /tmp.
func tempBase() string {
	base := os.TempDir()
	// The socket: base/leaserouter-pgtest-<pid>-<random>/.s.PGSQL.5432.
	if len(base)+len(dirPrefix)+len("/4294967295-4294967295/.s.PGSQL.5432") >= 100 {
		return "/tmp"
	}
	return base
}

// unprivileged is the user a root test process runs the server as:
// "postgres" (the Debian package's), else "nobody".
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgtest: running as root and no unprivileged user (postgres, nobody) to run the server as")
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

// URL is a connection string for database name on the cluster, over its
// Unix socket, as the superuser "postgres".
func (c *Cluster) URL(name string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", c.dir, name)
}

// Start starts the server (after Stop), waiting until it accepts
// connections or ctx is done. Starting a running cluster does nothing.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running != nil {
		return nil
	}
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		// The parent-death signal is sent when the thread that started
		// the server ends: this goroutine keeps its thread, and lives as
		// long as the server.
		runtime.LockOSThread()
		cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.data(), "-k", c.dir,
			"-c", "listen_addresses=", "-c", "port=5432", "-c", "max_connections=200",
			"-c", "shared_buffers=64MB")
		cmd.SysProcAttr = serverAttr(c.cred, !c.watchdog)
		log, err := os.Create(filepath.Join(c.dir, "server.log"))
		if err == nil {
			cmd.Stdout, cmd.Stderr = log, log
			err = cmd.Start()
		}
		var dog *watchdog
		if err == nil && c.watchdog {
			if dog, err = watch(cmd.Process.Pid); err != nil {
				_ = cmd.Process.Signal(syscall.SIGQUIT)
				_ = cmd.Wait()
			}
		}
		if err != nil {
			if log != nil {
				_ = log.Close()
			}
			started <- err
			return
		}
		c.cmd = cmd
		started <- nil
		err = cmd.Wait()
		dog.release()
		_ = log.Close()
		exited <- err
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("pgtest: start server: %w", err)
	}
	c.running = exited
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case err := <-exited:
			c.running = nil
			return fmt.Errorf("pgtest: server exited at start: %v (log in %s)", err, c.dir)
		case <-ctx.Done():
			_ = c.cmd.Process.Signal(syscall.SIGQUIT)
			<-exited
			c.running = nil
			return fmt.Errorf("pgtest: server not ready: %w (log in %s)", ctx.Err(), c.dir)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop stops the server with a fast shutdown (sessions are ended, their
// transactions rolled back), or an immediate one (as a crash) if crash is
// set, and waits for it to exit. Stopping a stopped cluster does nothing.
func (c *Cluster) Stop(crash bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		return nil
	}
	sig := syscall.SIGINT // fast shutdown
	if crash {
		sig = syscall.SIGQUIT // immediate shutdown: recovery at the next start
	}
	_ = c.cmd.Process.Signal(sig)
	<-c.running
	c.running = nil
	return nil
}

// Close stops the server and removes its directory.
func (c *Cluster) Close() error {
	err := c.Stop(false)
	return errors.Join(err, os.RemoveAll(c.dir))
}

// sweep removes the directories of clusters whose test process is gone
// (killed before it could remove them); their servers died with it.
func sweep() {
	found, _ := filepath.Glob(filepath.Join(tempBase(), dirPrefix+"*"))
	for _, d := range found {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(d), dirPrefix), "-", 2)[0])
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			spid, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
			if spid > 0 && alive(spid) {
				continue // its server has not finished shutting down
			}
		}
		_ = os.RemoveAll(d)
	}
}

// alive reports whether process pid exists (EPERM: it does, as another
// user's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
