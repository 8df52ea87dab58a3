// Command service runs a small service's jobs of three kinds over two
// queues with one leaserouter.Client: it surveys a Go source tree.
//
//	service [-fail p] [-io n] [-cpu n] [dir]
//
// With no dir it surveys the Go distribution's source. A "scan" job lists
// one directory and enqueues a "scan" job per subdirectory and, per Go
// file, a "parse" job (count its functions; queue "cpu") and a "checksum"
// job (its SHA-256; queue "io"), so the queues fill as the jobs run. A
// middleware around every attempt counts attempts per kind and, with
// -fail p, fails a fraction p of them before the handler runs: those jobs
// are retried after a backoff. Results are written through a
// leaserouter.Fence keyed by file, so a stale attempt could never
// overwrite a newer one's. The program waits with Client.Drained until
// every queue is empty, stops the Client, and checks every result against
// a sequential pass: the exit status is 1 if a file is missing (lost) or
// wrong (mismatch), 2 for bad usage.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/gosource"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// The payloads of the three kinds.
type (
	dir  struct{ Path string }
	file struct{ Path string }
)

// facts is what the jobs learn of one Go file.
type facts struct {
	funcs, exported int
	sum             [sha256.Size]byte
	parsed, summed  bool
}

type config struct {
	root    string
	fail    float64
	io, cpu int
}

// survey is the service: its results, behind a Fence, and its counters.
type survey struct {
	fence    leaserouter.Fence
	mu       sync.Mutex
	files    map[string]*facts
	dirs     atomic.Int64
	attempts sync.Map // kind -> *atomic.Int64
	failed   atomic.Int64
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintf(stderr, "service: %v\n", err)
		return 2
	}
	s := &survey{files: map[string]*facts{}}
	start := time.Now()
	if err := s.run(cfg); err != nil {
		fmt.Fprintf(stderr, "service: %v\n", err)
		return 1
	}
	return s.report(cfg, time.Since(start), stdout, stderr)
}

func parseArgs(args []string, stderr io.Writer) (config, error) {
	fl := flag.NewFlagSet("service", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfg := config{}
	fl.Float64Var(&cfg.fail, "fail", 0.02, "fraction of attempts the middleware fails before the handler (retried)")
	fl.IntVar(&cfg.io, "io", 16, "workers of queue io (scan, checksum)")
	fl.IntVar(&cfg.cpu, "cpu", runtime.GOMAXPROCS(0), "workers of queue cpu (parse)")
	if err := fl.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.fail < 0 || cfg.fail > 0.5 {
		return cfg, fmt.Errorf("-fail %v: must be in [0, 0.5]", cfg.fail)
	}
	if cfg.io < 1 || cfg.cpu < 1 {
		return cfg, fmt.Errorf("-io and -cpu must be at least 1")
	}
	root, err := gosource.Root(fl)
	cfg.root = root
	return cfg, err
}

// errInjected is the middleware's injected failure.
var errInjected = errors.New("injected failure")

// run builds the Client, registers the kinds, enqueues the root's scan
// and waits until every queue is drained.
func (s *survey) run(cfg config) error {
	if _, err := os.Stat(cfg.root); err != nil {
		return err
	}
	c, err := leaserouter.NewClient(leaserouter.ClientOptions{
		Options: leaserouter.Options{
			LeaseDuration: 30 * time.Second,
			MaxAttempts:   20, // injected failures never exhaust a job: a lost file is a real bug
			Backoff:       func(int) time.Duration { return time.Millisecond },
		},
		Queues: map[string]leaserouter.QueueConfig{
			"io":  {Workers: cfg.io},
			"cpu": {Workers: cfg.cpu},
		},
		Middleware: []leaserouter.Middleware{s.count(cfg.fail)},
	})
	if err != nil {
		return err
	}
	var scan *leaserouter.Kind[dir]
	var parse, checksum *leaserouter.Kind[file]
	scan, err = leaserouter.Register(c, "scan", func(ctx context.Context, l *leaserouter.Lease[dir]) error {
		return s.scan(ctx, l, scan, parse, checksum)
	}, leaserouter.WithKindQueue("io"))
	if err != nil {
		return err
	}
	if parse, err = leaserouter.Register(c, "parse", s.parse, leaserouter.WithKindQueue("cpu")); err != nil {
		return err
	}
	if checksum, err = leaserouter.Register(c, "checksum", s.checksum, leaserouter.WithKindQueue("io")); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := scan.Enqueue(ctx, cfg.root, dir{cfg.root}); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	drained := c.Drained(ctx)
	stop := c.Stop(ctx)
	return errors.Join(drained, stop)
}

// count is the middleware: it counts each attempt by kind and fails a
// fraction fail of them before the handler runs.
func (s *survey) count(fail float64) leaserouter.Middleware {
	return func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
		n, _ := s.attempts.LoadOrStore(a.Kind, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if rand.Float64() < fail {
			s.failed.Add(1)
			return fmt.Errorf("%s %s attempt %d: %w", a.Kind, a.JobID, a.Attempt, errInjected)
		}
		return next(ctx)
	}
}

// scan lists one directory: a scan job per subdirectory (testdata and
// hidden ones skipped, as the go command does), a parse and a checksum job
// per Go file. A job ID is unique within its queue: a retried scan finds
// its follow-ups there already (ErrDuplicate), which is no failure.
func (s *survey) scan(ctx context.Context, l *leaserouter.Lease[dir], scan *leaserouter.Kind[dir], parse, checksum *leaserouter.Kind[file]) error {
	entries, err := os.ReadDir(l.Payload.Path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(l.Payload.Path, e.Name())
		var err error
		switch {
		case e.IsDir() && !skipDir(e.Name()):
			err = scan.Enqueue(ctx, p, dir{p})
		case e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".go"):
			err = errors.Join(parse.Enqueue(ctx, p, file{p}), checksum.Enqueue(ctx, p, file{p}))
		}
		if err != nil && !onlyDuplicates(err) {
			return err
		}
	}
	s.dirs.Add(1)
	return nil
}

// onlyDuplicates reports whether every error joined in err is ErrDuplicate.
func onlyDuplicates(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if e != nil && !errors.Is(e, leaserouter.ErrDuplicate) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, leaserouter.ErrDuplicate)
}

func skipDir(name string) bool {
	return name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// parse counts a file's top-level functions and methods, and the exported ones.
func (s *survey) parse(ctx context.Context, l *leaserouter.Lease[file]) error {
	funcs, exported, err := countFuncs(l.Payload.Path)
	if err != nil {
		return leaserouter.Permanent(err) // a file that does not parse never will
	}
	return s.write(l.Payload.Path, l.Token, func(f *facts) { f.funcs, f.exported, f.parsed = funcs, exported, true })
}

// checksum takes a file's SHA-256.
func (s *survey) checksum(ctx context.Context, l *leaserouter.Lease[file]) error {
	sum, err := sumFile(l.Payload.Path)
	if err != nil {
		return err
	}
	return s.write(l.Payload.Path, l.Token, func(f *facts) { f.sum, f.summed = sum, true })
}

// write records what a job learned of path through the fence: a write
// of a lease older than the last one admitted for the key is refused.
func (s *survey) write(path string, t leaserouter.Token, set func(*facts)) error {
	return s.fence.Do(path, t, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		f := s.files[path]
		if f == nil {
			f = new(facts)
			s.files[path] = f
		}
		set(f)
		return nil
	})
}

func countFuncs(path string) (funcs, exported int, err error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return 0, 0, err
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			funcs++
			if fd.Name.IsExported() {
				exported++
			}
		}
	}
	return funcs, exported, nil
}

func sumFile(path string) ([sha256.Size]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(data), nil
}

// report checks every result against a sequential pass and prints the
// summary line.
func (s *survey) report(cfg config, took time.Duration, stdout, stderr io.Writer) int {
	var lost, mismatches, funcs, exported, files int
	err := filepath.WalkDir(cfg.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != cfg.root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		files++
		got := s.files[p]
		wantFuncs, wantExported, perr := countFuncs(p)
		sum, serr := sumFile(p)
		if serr != nil {
			return serr
		}
		switch {
		case got == nil || !got.summed || perr == nil && !got.parsed:
			lost++
			fmt.Fprintf(stderr, "service: lost %s\n", p)
		case got.sum != sum || perr == nil && (got.funcs != wantFuncs || got.exported != wantExported):
			mismatches++
			fmt.Fprintf(stderr, "service: mismatch %s\n", p)
		}
		funcs, exported = funcs+wantFuncs, exported+wantExported
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "service: checking: %v\n", err)
		return 1
	}
	var kinds []string
	s.attempts.Range(func(k, v any) bool {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(kinds)
	fmt.Fprintf(stdout, "service: dirs=%d files=%d funcs=%d exported=%d attempts=%s failed_attempts=%d lost=%d mismatches=%d took=%v\n",
		s.dirs.Load(), files, funcs, exported, strings.Join(kinds, ","), s.failed.Load(), lost, mismatches, took.Round(time.Millisecond))
	if lost > 0 || mismatches > 0 {
		return 1
	}
	return 0
}
