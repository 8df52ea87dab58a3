// Command fileindex-console runs the file-indexing workload of
// examples/fileindex — one job per file, workers that crash holding a
// lease or stall past it — and serves the operator's console for it, so
// that leases, expirations, stale rejections and dead jobs can be watched
// and acted on while they happen.
//
//	fileindex-console [-duration d] [-addr host:port] [-workers n]
//	                  [-crash p] [-stall p] [-flaky p] [-dead p] [-lease d] [dir]
//
// With no dir it indexes the Go source tree, round after round (each
// round's IDs are "r<round>/<path>"), until -duration has passed or it is
// interrupted. The console is mounted under /jobs/ on -addr (by default a
// free port of 127.0.0.1); its URL is the first line printed. The exit
// status is 0, 1 on failure, 2 for bad usage.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/leaserouter/leaserouter/internal/gosource"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	root                     string
	addr                     string
	duration, lease          time.Duration
	workers                  int
	crash, stall, flaky, die float64
}

// file is a job's payload.
type file struct {
	Path  string `json:"path"`
	Round int    `json:"round"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintf(stderr, "fileindex-console: %v\n", err)
		return 2
	}
	fail := func(err error) int { fmt.Fprintf(stderr, "fileindex-console: %v\n", err); return 1 }
	paths, err := listFiles(cfg.root)
	if err != nil {
		return fail(err)
	}
	r, err := leaserouter.New[file](leaserouter.Options{
		LeaseDuration: cfg.lease,
		MaxAttempts:   5,
		Backoff:       func(attempt int) time.Duration { return time.Duration(attempt) * cfg.lease / 2 },
	})
	if err != nil {
		return fail(err)
	}
	h, err := console.New(console.Options{Title: "fileindex"}, console.Router("fileindex", r))
	if err != nil {
		return fail(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/jobs/", http.StripPrefix("/jobs", h))
	mux.Handle("/{$}", http.RedirectHandler("/jobs/", http.StatusFound))
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	var serving sync.WaitGroup
	serving.Go(func() { _ = srv.Serve(ln) })
	fmt.Fprintf(stdout, "console: http://%s/jobs/\n", ln.Addr())

	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	w := &workload{cfg: cfg, r: r, root: cfg.root, paths: paths}
	w.wg.Go(func() { w.feed(ctx) })
	for range cfg.workers {
		w.wg.Go(func() { w.work(ctx) })
	}
	<-ctx.Done()
	w.wg.Wait() // every worker, stalled ones included, returns once ctx is done

	shut, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShut()
	_ = srv.Shutdown(shut)
	serving.Wait()
	_ = r.Close(shut)
	s := r.Stats()
	fmt.Fprintf(stdout, "fileindex-console: rounds=%d enqueued=%d completed=%d leases=%d expirations=%d stale_rejections=%d dead=%d\n",
		w.round.Load(), s.Enqueued, w.completed.Load(), s.LeasesGranted, s.Expirations, s.StaleRejections, s.Dead)
	return 0
}

func parseArgs(args []string, stderr io.Writer) (config, error) {
	fl := flag.NewFlagSet("fileindex-console", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: fileindex-console [flags] [dir]  (default dir: the Go source tree)")
		fl.PrintDefaults()
	}
	var c config
	fl.DurationVar(&c.duration, "duration", 30*time.Second, "how long to run before exiting")
	fl.StringVar(&c.addr, "addr", "127.0.0.1:0", "address the console listens on (port 0: a free one)")
	fl.IntVar(&c.workers, "workers", min(4, runtime.GOMAXPROCS(0)), "number of workers")
	fl.Float64Var(&c.crash, "crash", 0.02, "probability that a worker abandons its lease (it expires)")
	fl.Float64Var(&c.stall, "stall", 0.02, "probability that a worker stalls past its lease, then completes (refused: a stale rejection)")
	fl.Float64Var(&c.flaky, "flaky", 0.05, "probability of a transient failure (retried after a backoff)")
	fl.Float64Var(&c.die, "dead", 0.01, "probability of a permanent failure (the job is dead at once)")
	fl.DurationVar(&c.lease, "lease", 2*time.Second, "lease duration")
	if err := fl.Parse(args); err != nil {
		return c, err
	}
	for name, p := range map[string]float64{"crash": c.crash, "stall": c.stall, "flaky": c.flaky, "dead": c.die} {
		if !(p >= 0 && p <= 1) {
			return c, fmt.Errorf("-%s %v: must be a probability in [0,1]", name, p)
		}
	}
	switch {
	case c.lease < 10*time.Millisecond:
		return c, fmt.Errorf("-lease %v: must be at least 10ms", c.lease)
	case c.duration <= 0:
		return c, fmt.Errorf("-duration %v: must be positive", c.duration)
	case c.workers < 1:
		return c, fmt.Errorf("-workers %d: must be at least 1", c.workers)
	}
	var err error
	c.root, err = gosource.Root(fl)
	return c, err
}

// listFiles returns the regular files under root, relative to it.
func listFiles(root string) ([]string, error) {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(root, p)
			paths = append(paths, filepath.ToSlash(rel))
		}
		return err
	})
	if err == nil && len(paths) == 0 {
		err = fmt.Errorf("no files under %s", root)
	}
	return paths, err
}

type workload struct {
	cfg       config
	r         *leaserouter.Router[file]
	root      string
	paths     []string
	round     atomic.Int64
	completed atomic.Int64
	ids       atomic.Int64
	wg        sync.WaitGroup
}

// feed enqueues a round of every file whenever the previous one is
// finished, until ctx is done.
func (w *workload) feed(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if s := w.r.Stats(); s.Pending+s.Scheduled+s.Leased == 0 {
			n := int(w.round.Add(1))
			for _, p := range w.paths {
				if ctx.Err() != nil {
					return
				}
				_ = w.r.Enqueue(fmt.Sprintf("r%d/%s", n, p), file{Path: p, Round: n}, leaserouter.WithPriority(rand.IntN(3)))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// work is one worker: it leases jobs until ctx is done (or it stalls).
func (w *workload) work(ctx context.Context) {
	id := fmt.Sprintf("indexer-%d", w.ids.Add(1))
	for {
		l, err := w.r.Acquire(ctx, id)
		if err != nil {
			return
		}
		kctx, stopHeartbeats := leaserouter.KeepAlive(ctx, l, 0)
		n, err := digest(kctx, filepath.Join(w.root, filepath.FromSlash(l.Payload.Path)))
		stopHeartbeats()
		// Some work after the read, so that leases are there to see.
		pause(ctx, time.Duration(rand.IntN(40))*time.Millisecond)
		switch p := rand.Float64(); {
		case err != nil:
			_ = l.Fail(err)
		case p < w.cfg.crash:
			// Crash: abandon the lease; it expires and is leased again.
		case p < w.cfg.crash+w.cfg.stall:
			// Stall past the lease, then complete: refused, a stale
			// rejection. A replacement worker takes this one's place.
			w.wg.Go(func() { w.work(ctx) })
			pause(ctx, 2*w.cfg.lease)
			_ = l.Complete()
			return
		case p < w.cfg.crash+w.cfg.stall+w.cfg.flaky:
			_ = l.Fail(fmt.Errorf("injected transient error reading %s (%d bytes)", l.Payload.Path, n))
		case p < w.cfg.crash+w.cfg.stall+w.cfg.flaky+w.cfg.die:
			_ = l.Fail(leaserouter.Permanent(fmt.Errorf("injected: %s cannot be indexed", l.Payload.Path)))
		default:
			_ = l.Heartbeat([]byte(fmt.Sprintf("indexed %d bytes", n)))
			if l.Complete() == nil {
				w.completed.Add(1)
			}
		}
	}
}

// pause waits d or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// digest reads path, giving up as soon as ctx is done, and returns its size.
func digest(ctx context.Context, path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h, buf, n := sha256.New(), make([]byte, 64<<10), int64(0)
	for {
		if err := context.Cause(ctx); err != nil {
			return n, err
		}
		k, err := f.Read(buf)
		h.Write(buf[:k])
		n += int64(k)
		if err == io.EOF {
			return n, nil
		} else if err != nil {
			return n, err
		}
	}
}
