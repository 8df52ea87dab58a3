// Command demo walks four jobs through a leaserouter.Router and prints every
// transition, then the final state of each job:
//
//   - job-A is quick: leased, completed, done on its first attempt.
//   - job-B takes longer than its lease and its worker never heartbeats. The
//     lease expires, another worker leases the job again under a higher
//     fencing token, and the first worker's late Complete is refused.
//   - job-C's worker crashes holding the lease. Nothing else happens until the
//     lease expires; then the job is retried and succeeds.
//   - job-D runs longer than its lease under Router.Run, whose background
//     heartbeats keep the lease alive, so it succeeds on its first attempt.
//
// Leases last 300ms, so the whole program runs in under a second. Its test
// runs it under testing/synctest, where the same output comes out with fake
// time, instantly and identically every run.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter"
)

const (
	lease     = 300 * time.Millisecond
	heartbeat = lease / 3
	// longWork is how long job-D takes: more than one lease, so only
	// heartbeats let it finish on its first attempt. It is not a multiple
	// of heartbeat, so no heartbeat falls on the instant the job ends.
	longWork = lease + lease/6
)

func main() { os.Exit(run(os.Stdout)) }

// run plays the scenario, writes its trace and the final snapshot to w, and
// returns the process exit code.
func run(w io.Writer) int {
	tr := &tracer{start: time.Now()}
	r, err := leaserouter.New[string](leaserouter.Options{
		LeaseDuration: lease,
		MaxAttempts:   3,
		OnEvent:       tr.record,
	})
	if err != nil {
		fmt.Fprintln(w, "demo:", err)
		return 1
	}
	late, err := scenario(context.Background(), r)
	// Close delivers every event before it returns: after it, the trace is
	// complete and nothing changes any more.
	if cerr := r.Close(context.Background()); err == nil {
		err = cerr
	}

	fmt.Fprintf(w, "== events (tokens by rank: #1 is the first token issued, %d)\n", tr.base+1)
	for _, line := range tr.lines {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, "== late completion by worker-2")
	fmt.Fprintf(w, "job-B: Complete returned %s (ErrLeaseLost: %t)\n",
		tr.describe(late), errors.Is(late, leaserouter.ErrLeaseLost))
	fmt.Fprintln(w, "== final snapshot")
	for _, id := range []string{"job-A", "job-B", "job-C", "job-D"} {
		j, ok := r.Get(id)
		if !ok {
			fmt.Fprintf(w, "%s: unknown\n", id)
			continue
		}
		fmt.Fprintf(w, "%s: state=%s attempt=%d token=%s owner=%s last_error=%s\n",
			j.ID, j.State, j.Attempt, tr.token(j.Token), orDash(j.Owner), orDash(j.LastError))
	}
	if err != nil {
		fmt.Fprintln(w, "demo:", err)
		return 1
	}
	return 0
}

// scenario drives the four jobs. Each worker is a goroutine or the caller
// itself; channels order the steps whose order the lease timing alone would
// leave to the scheduler, so the trace is the same on every run. It returns
// what worker-2's late Complete returned.
func scenario(ctx context.Context, r *leaserouter.Router[string]) (late error, err error) {
	for _, e := range []struct {
		id   string
		opts []leaserouter.EnqueueOption
	}{
		{id: "job-A"},
		{id: "job-B"},
		// job-C comes due half a lease later, so its lease, and its expiry,
		// fall between job-B's rather than on the same instants.
		{id: "job-C", opts: []leaserouter.EnqueueOption{leaserouter.WithDelay(lease / 2)}},
	} {
		if err := r.Enqueue(e.id, "payload of "+e.id, e.opts...); err != nil {
			return nil, err
		}
	}

	// worker-1 takes job-A (ready first) and is done well within its lease.
	a, err := r.Acquire(ctx, "worker-1")
	if err != nil {
		return nil, err
	}
	if err := a.Complete(); err != nil {
		return nil, err
	}

	// worker-2 takes job-B, whose work outlasts the lease, and sends no
	// heartbeat. Its work "ends" once the job has passed to another worker:
	// the channel makes that ordering certain instead of a race with the
	// clock.
	b, err := r.Acquire(ctx, "worker-2")
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	passedOn := make(chan struct{})
	handOver := sync.OnceFunc(func() { close(passedOn) })
	defer handOver() // on every exit path, so worker-2 never waits forever
	lateDone := make(chan error, 1)
	wg.Go(func() {
		<-passedOn
		lateDone <- b.Complete() // too late: refused with ErrLeaseLost
	})

	// worker-3 blocks until job-C comes due, then crashes: it never calls
	// Complete, Fail or Release, so only the lease's expiry frees the job.
	if _, err := r.Acquire(ctx, "worker-3"); err != nil {
		return nil, err
	}

	// worker-4 starts only now, so that job-C went to worker-3. It gets
	// job-B when worker-2's lease expires (attempt 2, higher token), waits
	// for worker-2's late Complete to be refused, and completes job-B
	// itself. Then it gets job-C when worker-3's lease expires.
	for range 2 {
		l, err := r.Acquire(ctx, "worker-4")
		if err != nil {
			return nil, err
		}
		if l.JobID == "job-B" {
			handOver()
			late = <-lateDone
		}
		if err := l.Complete(); err != nil {
			return late, err
		}
	}

	return late, heartbeatJob(ctx, r)
}

// heartbeatJob runs job-D, which takes longer than a lease, under Run: its
// lease survives because Run heartbeats while the handler works.
func heartbeatJob(ctx context.Context, r *leaserouter.Router[string]) error {
	if err := r.Enqueue("job-D", "payload of job-D"); err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	handled := make(chan struct{})
	runErr := make(chan error, 1)
	go func() {
		runErr <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, WorkerID: "runner", HeartbeatInterval: heartbeat},
			func(ctx context.Context, l *leaserouter.Lease[string]) error {
				defer close(handled)
				select {
				case <-time.After(longWork):
					return nil
				case <-ctx.Done(): // the lease was lost: stop working
					return context.Cause(ctx)
				}
			})
	}()
	// Stop Run once job-D has been handled: a handler that returned nil
	// still has its job completed when Run's ctx is canceled.
	select {
	case <-handled:
		stop()
		return <-runErr
	case err := <-runErr:
		return err
	}
}

// tracer formats events as they are delivered. OnEvent calls are serial, but
// the mutex also orders them with the reads in run.
type tracer struct {
	start time.Time
	mu    sync.Mutex
	base  leaserouter.Token // the first token issued, minus one
	lines []string
}

func (t *tracer) record(e leaserouter.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.base == 0 && e.Token != 0 {
		// Tokens only grow, so the first one seen is the first issued.
		t.base = e.Token - 1
	}
	t.lines = append(t.lines, fmt.Sprintf("%+.3fs %-15s job=%s worker=%-8s token=%-2s attempt=%d err=%s",
		e.Time.Sub(t.start).Seconds(), e.Kind, e.JobID, orDash(e.WorkerID),
		t.tokenLocked(e.Token), e.Attempt, t.describeLocked(e.Err)))
}

// token shows a token by rank: tokens are seeded from the wall clock, so
// their values change from run to run while their order does not.
func (t *tracer) token(tok leaserouter.Token) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tokenLocked(tok)
}

func (t *tracer) tokenLocked(tok leaserouter.Token) string {
	if tok == 0 {
		return "-"
	}
	return fmt.Sprintf("#%d", tok-t.base)
}

func (t *tracer) describe(err error) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.describeLocked(err)
}

// describeLocked spells out a LeaseLostError with ranked tokens.
func (t *tracer) describeLocked(err error) string {
	var lost *leaserouter.LeaseLostError
	switch {
	case err == nil:
		return "-"
	case errors.As(err, &lost):
		return fmt.Sprintf("lease lost: token %s, current %s (%s)",
			t.tokenLocked(lost.Token), t.tokenLocked(lost.Current), lost.Reason)
	default:
		return strings.ReplaceAll(err.Error(), "\n", " ")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
