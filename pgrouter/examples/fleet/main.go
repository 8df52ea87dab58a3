// Command fleet is the main job across processes: it indexes a source tree
// (as examples/fileindex does) with worker processes sharing one
// PostgreSQL job set through pgrouter, kills some of them with SIGKILL at
// random and starts them again, and verifies the result.
//
//	fleet [-procs n] [-kill d] [-pause d] [-lease d] [-restart=false] [-console-addr a] [dir]
//
// With no dir it indexes the Go source tree. Each worker process runs
// pgrouter's Run; a handler reads its file, computes its SHA-256 and line
// count, and writes them in one transaction with Fence (keyed by path) and
// CompleteTx, so the result and the completion commit together and a
// stale worker's write is refused by the database. Every -pause, a random
// worker process is stopped (SIGSTOP, as a long GC pause or a frozen VM
// would) for one and a half leases, and then goes on writing what it was
// writing: the database refuses those stale writes (Unix systems only: on
// Windows -pause must be 0, its default there, and the workers are killed
// at the end rather than sent SIGTERM). While it runs, the
// parent process serves the web console of the fleet's queue (module
// github.com/leaserouter/leaserouter/console) on -console-addr, a free
// port of 127.0.0.1 by default, and prints its URL ("" disables it).
// The database is LEASEROUTER_DATABASE_URL, or a throwaway cluster started
// from the system's PostgreSQL binaries. Progress goes to stderr, a summary
// to stdout; the exit status is 1 if a file is lost or its record wrong,
// 2 for bad usage.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/leaserouter/leaserouter/internal/gosource"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// The environment a worker process is started with.
const (
	envWorker = "LEASEROUTER_FLEET_WORKER" // "1": run as a worker process
	envURL    = "LEASEROUTER_DATABASE_URL"
	envLease  = "LEASEROUTER_FLEET_LEASE"
)

// queue is the fleet's queue in the shared tables.
const queue = "fleet"

// retention keeps finished jobs for the whole run: the coordinator counts
// them to know when it is done.
const retention = 24 * time.Hour

// workers is the number of Run workers in each worker process.
const workers = 4

// maxAttempts is high enough that the injected kills and stalls never
// exhaust a job's attempts: a lost job is a real bug.
const maxAttempts = 20

func main() {
	if os.Getenv(envWorker) == "1" {
		os.Exit(worker(os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	root    string
	procs   int
	kill    time.Duration
	pause   time.Duration
	lease   time.Duration
	restart bool
	console string // the console's address; "" for none
}

func parseArgs(args []string, stderr io.Writer) (config, error) {
	fl := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfg := config{}
	fl.IntVar(&cfg.procs, "procs", 4, "worker processes")
	fl.DurationVar(&cfg.kill, "kill", 500*time.Millisecond, "SIGKILL a random worker process this often (0: never)")
	fl.DurationVar(&cfg.pause, "pause", defaultPause, "SIGSTOP a random worker process for 1.5 leases this often (0: never; Unix only)")
	fl.DurationVar(&cfg.lease, "lease", time.Second, "lease duration")
	fl.BoolVar(&cfg.restart, "restart", true, "crash and restart the throwaway server when half the files are done")
	fl.StringVar(&cfg.console, "console-addr", "127.0.0.1:0", "serve the web console of the fleet's queue on this address while it runs (\"\": none)")
	if err := fl.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case cfg.procs < 1:
		return cfg, fmt.Errorf("-procs %d, must be >= 1", cfg.procs)
	case cfg.kill < 0:
		return cfg, fmt.Errorf("-kill %v, must be >= 0", cfg.kill)
	case cfg.pause < 0:
		return cfg, fmt.Errorf("-pause %v, must be >= 0", cfg.pause)
	case cfg.pause > 0 && !canPause:
		return cfg, fmt.Errorf("-pause %v: no process can be paused (SIGSTOP) on this system, must be 0", cfg.pause)
	case cfg.lease < 100*time.Millisecond:
		return cfg, fmt.Errorf("-lease %v, must be >= 100ms", cfg.lease)
	}
	var err error
	cfg.root, err = gosource.Root(fl)
	return cfg, err
}

// summary is what a run found.
type summary struct {
	files, kills, pauses, restarts, refused, lost, mismatches int
	took                                                      time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintf(stderr, "fleet: %v\n", err)
		return 2
	}
	s, err := coordinate(cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "fleet: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "files=%d procs=%d killed=%d paused=%d server_restarts=%d stale_writes_refused=%d lost=%d mismatches=%d took=%v\n",
		s.files, cfg.procs, s.kills, s.pauses, s.restarts, s.refused, s.lost, s.mismatches, s.took.Round(time.Millisecond))
	if s.lost > 0 || s.mismatches > 0 {
		return 1
	}
	return 0
}

// coordinate sets up the database and the jobs, runs the worker
// processes with kills until every job has succeeded, and verifies.
func coordinate(cfg config, stderr io.Writer) (summary, error) {
	var s summary
	stderr = &lockedWriter{w: stderr} // written by this goroutine and by the copiers of the workers' stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv(envURL)
	var cluster *pgtest.Cluster
	if url == "" {
		fmt.Fprintln(stderr, "fleet: starting a throwaway PostgreSQL cluster")
		c, err := pgtest.StartCluster(ctx)
		if err != nil {
			return s, err
		}
		defer c.Close()
		url, cluster = c.URL("postgres"), c
	}
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		return s, err
	}
	defer db.Close()
	if err := setup(ctx, db); err != nil {
		return s, err
	}
	paths, err := listFiles(cfg.root)
	if err != nil {
		return s, err
	}
	s.files = len(paths)
	r, err := pgrouter.New[string](ctx, db, pgrouter.Options{Queue: queue, MaxAttempts: maxAttempts, LeaseDuration: cfg.lease, Retention: retention})
	if err != nil {
		return s, err
	}
	defer r.Close(context.Background())
	if cfg.console != "" {
		stop, err := serveConsole(ctx, db, cfg.console, stderr)
		if err != nil {
			return s, err
		}
		defer stop()
	}
	start := time.Now()
	specs := make([]leaserouter.JobSpec[string], len(paths))
	for i, p := range paths {
		specs[i] = leaserouter.JobSpec[string]{ID: p, Payload: p}
	}
	if _, err := r.EnqueueMany(ctx, specs); err != nil {
		return s, err
	}
	fmt.Fprintf(stderr, "fleet: %d jobs enqueued, starting %d worker processes\n", len(paths), cfg.procs)

	exe, err := os.Executable()
	if err != nil {
		return s, err
	}
	env := append(os.Environ(), envWorker+"=1", envURL+"="+url, envLease+"="+cfg.lease.String())
	procs := make([]*exec.Cmd, cfg.procs)
	startProc := func(i int) error {
		cmd := exec.Command(exe)
		cmd.Env, cmd.Stderr = env, stderr
		procs[i] = cmd
		return cmd.Start()
	}
	for i := range procs {
		if err := startProc(i); err != nil {
			return s, err
		}
	}
	var stopTickers []func()
	defer func() {
		for _, stop := range stopTickers {
			stop()
		}
	}()
	stopped := false
	stopProcs := func() {
		if stopped {
			return
		}
		stopped = true
		for _, p := range procs {
			_ = stopProc(p.Process)
		}
		for _, p := range procs {
			_ = p.Wait()
		}
	}
	defer stopProcs()

	ticker := func(d time.Duration) <-chan time.Time {
		if d == 0 {
			return nil
		}
		t := time.NewTicker(d)
		stopTickers = append(stopTickers, t.Stop)
		return t.C
	}
	kill, pause := ticker(cfg.kill), ticker(cfg.pause)
	pausedUntil := make([]time.Time, len(procs))
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	for {
		st, err := r.Stats(ctx)
		if err == nil && st.Succeeded+st.DeadJobs+st.Canceled == len(paths) {
			break
		}
		if err == nil && cfg.restart && cluster != nil && s.restarts == 0 && st.Succeeded >= len(paths)/2 {
			// Everyone loses the database mid-run: workers back off and go
			// on when it is back; nothing may be lost.
			fmt.Fprintf(stderr, "fleet: crashing the server (%d succeeded of %d)\n", st.Succeeded, len(paths))
			if err := cluster.Stop(true); err != nil {
				return s, err
			}
			if err := cluster.Start(ctx); err != nil {
				return s, err
			}
			s.restarts++
			fmt.Fprintln(stderr, "fleet: server started again")
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-kill:
			// Not a process paused lately: it is left to write late,
			// stale, once it goes on.
			var free []int
			for i := range procs {
				if time.Now().After(pausedUntil[i].Add(cfg.lease)) {
					free = append(free, i)
				}
			}
			if len(free) == 0 {
				continue
			}
			i := free[rand.IntN(len(free))]
			_ = procs[i].Process.Kill() // SIGKILL, holding whatever leases it held
			_ = procs[i].Wait()
			s.kills++
			if err := startProc(i); err != nil {
				return s, err
			}
			fmt.Fprintf(stderr, "fleet: killed worker %d, started it again\n", i)
		case <-pause:
			i := rand.IntN(len(procs))
			p := procs[i].Process
			if time.Now().After(pausedUntil[i].Add(cfg.lease)) && pauseProc(p) == nil {
				s.pauses++
				pausedUntil[i] = time.Now().Add(cfg.lease + cfg.lease/2)
				time.AfterFunc(cfg.lease+cfg.lease/2, func() { _ = resumeProc(p) })
				fmt.Fprintf(stderr, "fleet: paused worker process %d for %v\n", p.Pid, cfg.lease+cfg.lease/2)
			}
		case <-check.C:
		}
	}
	s.took = time.Since(start)
	stopProcs()
	if err := db.QueryRow(ctx, "SELECT count(*) FROM fleet_refused").Scan(&s.refused); err != nil {
		return s, err
	}
	s.lost, s.mismatches, err = verify(ctx, db, paths)
	return s, err
}

// serveConsole serves the console of the fleet's queue on addr, through a
// Router of its own, and prints its URL to stderr; stop shuts it down.
func serveConsole(ctx context.Context, db *pgxpool.Pool, addr string, stderr io.Writer) (stop func(), err error) {
	// The workers' Retention: finished jobs this Router settles stay as
	// long as theirs; the workers' Routers vacuum.
	r, err := pgrouter.New[json.RawMessage](ctx, db, pgrouter.Options{Queue: queue, Retention: retention, NoVacuum: true})
	if err != nil {
		return nil, err
	}
	h, err := console.New(console.Options{Title: "fleet"}, r)
	if err == nil {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			fmt.Fprintf(stderr, "console: http://%s/\n", ln.Addr())
			return func() {
				_ = srv.Close()
				_ = r.Close(context.Background())
			}, nil
		}
	}
	_ = r.Close(context.Background())
	return nil, err
}

// setup migrates the database and makes the fleet's own tables.
func setup(ctx context.Context, db *pgxpool.Pool) error {
	if err := pgrouter.Migrate(ctx, db); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `
		DROP TABLE IF EXISTS fleet_results, fleet_refused;
		DELETE FROM leaserouter_jobs WHERE queue = 'fleet';
		CREATE TABLE fleet_results (path text PRIMARY KEY, sha256 text NOT NULL, lines int NOT NULL, token bigint NOT NULL);
		CREATE TABLE fleet_refused (path text NOT NULL, token bigint NOT NULL, highest bigint NOT NULL)`)
	return err
}

// verify compares every file's record with a fresh sequential pass, and
// checks it was written by the lease that completed the job.
func verify(ctx context.Context, db *pgxpool.Pool, paths []string) (lost, mismatches int, err error) {
	for _, p := range paths {
		var sum string
		var lines int
		var fenced bool // the record was written by the job's last (completing) lease
		err := db.QueryRow(ctx, `SELECT r.sha256, r.lines, r.token = j.token FROM fleet_results r
			JOIN leaserouter_jobs j ON j.queue = $2 AND j.id = r.path WHERE r.path = $1`, p, queue).Scan(&sum, &lines, &fenced)
		if errors.Is(err, pgx.ErrNoRows) {
			lost++
			continue
		}
		if err != nil {
			return lost, mismatches, err
		}
		want, wantLines, err := index(p)
		if err != nil {
			return lost, mismatches, err
		}
		if sum != want || lines != wantLines || !fenced {
			mismatches++
		}
	}
	return lost, mismatches, nil
}

// worker is a worker process: Run until SIGTERM.
func worker(stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	lease, err := time.ParseDuration(os.Getenv(envLease))
	if err != nil {
		fmt.Fprintf(stderr, "fleet worker: %v\n", err)
		return 2
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv(envURL))
	if err != nil {
		fmt.Fprintf(stderr, "fleet worker: %v\n", err)
		return 2
	}
	// A connection for each handler's transaction, and more for the
	// claims, Run's heartbeats and the maintenance loop, so that handlers
	// waiting on a lock never starve the heartbeats.
	cfg.MaxConns = workers + 4
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "fleet worker: %v\n", err)
		return 1
	}
	defer db.Close()
	r, err := pgrouter.New[string](ctx, db, pgrouter.Options{Queue: queue, MaxAttempts: maxAttempts, LeaseDuration: lease, Retention: retention})
	if err != nil {
		fmt.Fprintf(stderr, "fleet worker: %v\n", err)
		return 1
	}
	defer r.Close(context.Background())
	err = r.Run(ctx, leaserouter.WorkerOptions{Workers: workers, WorkerID: fmt.Sprint("fleet-", os.Getpid())},
		func(hctx context.Context, l *pgrouter.Lease[string]) error {
			sum, lines, err := index(l.Payload)
			if err != nil {
				return err
			}
			// Written even if hctx is done (the process was paused past the
			// lease): the database, not this process, decides.
			return write(context.Background(), db, l, sum, lines)
		})
	if err != nil {
		fmt.Fprintf(stderr, "fleet worker: %v\n", err)
		return 1
	}
	return 0
}

// write stores a file's record and completes its job in one transaction,
// behind the path's fence: a stale holder's write is refused, by the fence
// (a newer holder wrote first) or by CompleteTx (the lease was lost), and
// noted in fleet_refused, outside the refused transaction.
func write(ctx context.Context, db *pgxpool.Pool, l *pgrouter.Lease[string], sum string, lines int) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var stale *leaserouter.StaleTokenError
	if err := pgrouter.Fence(ctx, tx, "file/"+l.Payload, l.Token); errors.As(err, &stale) {
		_, err := db.Exec(ctx, "INSERT INTO fleet_refused VALUES ($1, $2, $3)", l.Payload, int64(stale.Token), int64(stale.Highest))
		return err
	} else if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO fleet_results VALUES ($1, $2, $3, $4)
		ON CONFLICT (path) DO UPDATE SET sha256 = excluded.sha256, lines = excluded.lines, token = excluded.token`,
		l.Payload, sum, lines, int64(l.Token)); err != nil {
		return err
	}
	var lost *leaserouter.LeaseLostError
	if err := l.CompleteTx(ctx, tx); errors.As(err, &lost) {
		// The lease was lost (its job is another holder's now): the write
		// rolls back with the refused completion.
		_, err := db.Exec(ctx, "INSERT INTO fleet_refused VALUES ($1, $2, $3)", l.Payload, int64(lost.Token), int64(lost.Current))
		return err
	} else if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// index is a file's SHA-256 (hex) and line count.
func index(path string) (string, int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), bytes.Count(b, []byte{'\n'}), nil
}

// listFiles lists the regular files under root, skipping testdata.
func listFiles(root string) ([]string, error) {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") {
			paths = append(paths, p)
		}
		return nil
	})
	if err == nil && len(paths) == 0 {
		err = fmt.Errorf("no files under %s", root)
	}
	return paths, err
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
