// Command fileindex indexes a source tree with leaserouter, one job per file,
// while injecting the faults leases and fencing tokens exist for: workers
// that crash holding a lease, and workers that stall past it and then write.
//
//	fileindex [-workers n] [-crash p] [-stall p] [-lease d] [dir]
//
// With no dir it indexes the Go source tree. A worker leases a file's job,
// reads the file (heartbeating meanwhile), and writes its SHA-256 and line
// count into an index through a leaserouter.Fence keyed by path. At the end
// every record is checked against a fresh sequential pass; the exit status
// is 1 if a file is missing (lost) or wrong (mismatch), 2 for bad usage.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/gosource"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// maxAttempts is high enough that injected crashes and stalls (a few per
// cent each) never exhaust a job's attempts: a lost job is a real bug.
const maxAttempts = 10

type config struct {
	root         string
	workers      int
	crash, stall float64
	lease        time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int { fmt.Fprintf(stderr, "fileindex: %v\n", err); return 1 }
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0 // as flag.ExitOnError does
	} else if err != nil {
		fmt.Fprintf(stderr, "fileindex: %v\n", err)
		return 2
	}
	paths, err := listFiles(cfg.root)
	if err != nil {
		return fail(err)
	}
	x := &indexer{cfg: cfg, n: int64(len(paths)), done: make(chan struct{})}
	x.idx.entries, x.idx.written = map[string]entry{}, map[string]chan struct{}{}
	if x.n == 0 {
		close(x.done)
	}
	x.r, err = leaserouter.New[string](leaserouter.Options{
		LeaseDuration: cfg.lease,
		MaxAttempts:   maxAttempts,
		Backoff:       func(int) time.Duration { return cfg.lease }, // after a read error
		OnEvent:       x.onEvent,
	})
	if err != nil {
		return fail(err)
	}
	start := time.Now()
	for _, p := range paths {
		if err := x.r.Enqueue(p, p); err != nil {
			_ = x.r.Close(context.Background())
			return fail(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	for range cfg.workers {
		x.wg.Go(func() { x.work(ctx) })
	}
	x.showProgress(stderr)
	wall := time.Since(start)
	cancel() // every job is finished: idle workers return from Acquire
	x.wg.Wait()
	_ = x.r.Close(context.Background()) // no lease is left to drain
	return x.report(paths, wall, stdout, stderr)
}

func parseArgs(args []string, stderr io.Writer) (config, error) {
	fl := flag.NewFlagSet("fileindex", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: fileindex [flags] [dir]  (default dir: the Go source tree)")
		fl.PrintDefaults()
	}
	var c config
	fl.IntVar(&c.workers, "workers", runtime.GOMAXPROCS(0), "number of workers")
	fl.Float64Var(&c.crash, "crash", 0, "probability in [0,1] that a worker abandons its lease mid-job")
	fl.Float64Var(&c.stall, "stall", 0, "probability in [0,1] that a worker stalls past its lease, then writes")
	fl.DurationVar(&c.lease, "lease", 250*time.Millisecond, "lease duration (at least 1ms)")
	if err := fl.Parse(args); err != nil {
		return c, err
	}
	switch {
	case !(c.crash >= 0 && c.crash <= 1): // so that NaN fails too
		return c, fmt.Errorf("-crash %v: must be a probability in [0,1]", c.crash)
	case !(c.stall >= 0 && c.stall <= 1):
		return c, fmt.Errorf("-stall %v: must be a probability in [0,1]", c.stall)
	case c.lease < time.Millisecond: // heartbeats could not keep a shorter one
		return c, fmt.Errorf("-lease %v: must be at least 1ms", c.lease)
	case c.workers < 1:
		return c, fmt.Errorf("-workers %d: must be at least 1", c.workers)
	}
	var err error
	c.root, err = gosource.Root(fl)
	return c, err
}

// listFiles returns every regular file under root (symlinks are skipped).
func listFiles(root string) ([]string, error) {
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("cannot index %s: %w", root, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("cannot index %s: not a directory", root)
	}
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			paths = append(paths, p)
		}
		return err
	})
	return paths, err
}

// record is what the index stores for a file.
type record struct {
	size  int64
	lines int // newline bytes, as wc -l counts them
	sum   [sha256.Size]byte
}

// digest reads path, giving up as soon as ctx is done (the lease is lost).
func digest(ctx context.Context, path string) (record, error) {
	f, err := os.Open(path)
	if err != nil {
		return record{}, err
	}
	defer f.Close()
	var rec record
	h, buf := sha256.New(), make([]byte, 64<<10)
	for {
		if err := context.Cause(ctx); err != nil {
			return record{}, err
		}
		n, err := f.Read(buf)
		h.Write(buf[:n])
		rec.size += int64(n)
		rec.lines += bytes.Count(buf[:n], []byte{'\n'})
		if err == io.EOF {
			h.Sum(rec.sum[:0])
			return rec, nil
		} else if err != nil {
			return record{}, err
		}
	}
}

// index is the downstream store the fence guards. It also lets a stalled
// worker wait for a newer lease holder to write its path.
type index struct {
	mu      sync.Mutex
	entries map[string]entry
	written map[string]chan struct{} // closed at the path's next write
}

type entry struct {
	rec   record
	token leaserouter.Token // of the holder that wrote rec
}

func (x *index) put(path string, rec record, token leaserouter.Token) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.entries[path] = entry{rec, token}
	if ch := x.written[path]; ch != nil {
		close(ch)
		delete(x.written, path)
	}
}

// awaitNewer waits until a holder of a token above token has written path
// and reports whether one has: false if timeout fires first.
func (x *index) awaitNewer(path string, token leaserouter.Token, timeout <-chan time.Time) bool {
	for {
		x.mu.Lock()
		last, next := x.entries[path].token, x.written[path]
		if next == nil {
			next = make(chan struct{})
			x.written[path] = next
		}
		x.mu.Unlock()
		if last > token {
			return true
		}
		select {
		case <-next:
		case <-timeout:
			return false
		}
	}
}

type indexer struct {
	cfg   config
	r     *leaserouter.Router[string]
	fence leaserouter.Fence
	idx   index
	n     int64          // jobs enqueued
	done  chan struct{}  // closed when every job is finished
	wg    sync.WaitGroup // every worker, stalled ones included

	ids, finished, retries, staleBlocked, violations atomic.Int64
}

func (x *indexer) onEvent(e leaserouter.Event) {
	switch e.Kind {
	case leaserouter.EventLeaseAcquired:
		if e.Attempt > 1 { // an earlier holder lost the lease: a retry
			x.retries.Add(1)
		}
	case leaserouter.EventCompleted, leaserouter.EventDead:
		if x.finished.Add(1) == x.n {
			close(x.done)
		}
	}
}

// work is one worker: it leases jobs until ctx is done (or it stalls).
func (x *indexer) work(ctx context.Context) {
	id := fmt.Sprintf("worker-%d", x.ids.Add(1))
	for {
		l, err := x.r.Acquire(ctx, id)
		if err != nil {
			return // ctx is done: every job is finished
		}
		// Heartbeat while reading, so a big file keeps its lease; if the
		// lease is lost anyway, kctx is canceled and the read stops.
		kctx, stopHeartbeats := leaserouter.KeepAlive(ctx, l, 0)
		rec, err := digest(kctx, l.Payload)
		stopHeartbeats()
		switch {
		case err != nil:
			_ = l.Fail(err) // refused if the lease was lost: it is retried anyway
		case rand.Float64() < x.cfg.crash:
			// Crash: abandon the lease, no heartbeat, no Complete. It
			// expires and another worker retries; this one carries on.
		case rand.Float64() < x.cfg.stall:
			// A replacement takes the stalled worker's place, as a
			// supervisor replaces a hung process; otherwise stalls would
			// soon idle every worker and no one would re-lease their jobs.
			x.wg.Go(func() { x.work(ctx) })
			x.stall(l, rec)
			return
		default:
			if x.write(l, rec) == nil {
				_ = l.Complete() // refused if the lease expired meanwhile: it is retried
			}
		}
	}
}

func (x *indexer) write(l *leaserouter.Lease[string], rec record) error {
	err := x.fence.Do(l.JobID, l.Token, func() error {
		x.idx.put(l.JobID, rec, l.Token)
		return nil
	})
	if errors.Is(err, leaserouter.ErrStaleToken) {
		x.staleBlocked.Add(1)
	}
	return err
}

// stall plays a worker frozen (GC pause, swapped-out VM) holding a lease:
// no heartbeats, and it wakes only once its lease has expired and a newer
// holder has written the record. Its write must then be blocked by the
// fence and its Complete refused; anything else is a violation.
func (x *indexer) stall(l *leaserouter.Lease[string], rec record) {
	// The timeout, far past the lease, only bounds the wait should no one
	// write the record; the stale write then goes through, harmlessly.
	timeout := time.NewTimer(max(20*x.cfg.lease, time.Second))
	defer timeout.Stop()
	superseded := x.idx.awaitNewer(l.JobID, l.Token, timeout.C)
	if err := x.write(l, rec); superseded && err == nil {
		x.violations.Add(1) // the fence let a stale holder overwrite a newer one
	}
	if err := l.Complete(); !errors.Is(err, leaserouter.ErrLeaseLost) {
		x.violations.Add(1) // a lease was still valid long past its expiry
	}
}

// showProgress reports on w until every job is finished: one line redrawn
// in place on a terminal, an occasional plain line otherwise (so a log file
// does not fill with carriage returns).
func (x *indexer) showProgress(w io.Writer) {
	tty, every := false, 2*time.Second
	if f, ok := w.(*os.File); ok {
		fi, err := f.Stat()
		tty = err == nil && fi.Mode()&os.ModeCharDevice != 0
	}
	format := "fileindex: %d/%d files, %d leases, %d expirations, %d stale writes blocked"
	if tty {
		every, format = 100*time.Millisecond, "\r"+format+"\033[K" // redraw, erase the rest
	} else {
		format += "\n"
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-x.done:
			if tty {
				fmt.Fprint(w, "\r\033[K")
			}
			return
		case <-tick.C:
			s := x.r.Stats()
			fmt.Fprintf(w, format, x.finished.Load(), x.n, s.LeasesGranted, s.Expirations, x.staleBlocked.Load())
		}
	}
}

// report checks every record against a fresh sequential pass, prints the
// results and returns the exit status.
func (x *indexer) report(paths []string, wall time.Duration, stdout, stderr io.Writer) int {
	var total int64
	var mismatches, lost int
	complain := func(format string, args ...any) {
		if mismatches+lost <= 5 { // a few examples say enough
			fmt.Fprintf(stderr, "fileindex: "+format+"\n", args...)
		}
	}
	for _, p := range paths {
		e, indexed := x.idx.entries[p] // every worker has returned: no lock needed
		j, _ := x.r.Get(p)
		want, err := digest(context.Background(), p)
		switch {
		case !indexed || j.State != leaserouter.StateSucceeded:
			lost++
			complain("lost %s: job %v, indexed %v, last error %q", p, j.State, indexed, j.LastError)
		case err != nil:
			mismatches++
			complain("cannot verify %s: %v", p, err)
		case e.rec != want:
			mismatches++
			complain("mismatch %s: indexed %+v, file has %+v", p, e.rec, want)
		}
		total += want.size
	}
	s := x.r.Stats()
	var line strings.Builder
	for _, f := range []struct {
		name  string
		value any
	}{
		{"files", len(paths)}, {"bytes", total}, {"wall", wall.Round(time.Millisecond)},
		{"files/s", fmt.Sprintf("%.0f", float64(len(paths))/wall.Seconds())},
		{"leases", s.LeasesGranted}, {"expirations", s.Expirations}, {"retries", x.retries.Load()},
		{"stale_blocked", x.staleBlocked.Load()}, {"mismatches", mismatches}, {"lost", lost},
	} {
		fmt.Fprintf(stdout, "%-14s %v\n", f.name, f.value)
		fmt.Fprintf(&line, " %s=%v", f.name, f.value)
	}
	fmt.Fprintf(stdout, "fileindex:%s\n", &line)
	if v := x.violations.Load(); v > 0 {
		fmt.Fprintf(stderr, "fileindex: %d stale lease holders were not refused\n", v)
		return 1
	}
	if mismatches > 0 || lost > 0 {
		return 1
	}
	return 0
}
