package leaserouter_test

// Races, three ways:
//
//   - TestRace*: real concurrency under -race. Every test is bounded by a
//     fixed number of operations, never by a duration, and waits on signals
//     (events, channels, contexts), never on sleeps. Assertions come after
//     the goroutines have ended; goroutines report problems through
//     raceFailures instead of calling require off the test goroutine.
//   - harness_test.go: races in a forced order. Each scenario runs in a
//     testing/synctest bubble and forces its interleaving exactly — with
//     gates (goroutines held on channels until the test opens them), the
//     reaper held where its ReaperWoke signal is called, and a context that
//     runs a step when Acquire consults it — so both orders of a race are
//     reproduced every run.
//   - TestChaosSoak: a few seconds of real-time chaos (crashes, stalls past
//     expiry, failures, releases, cancels) checked against the event stream.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// raceEventLog records every event in delivery order.
type raceEventLog struct {
	mu  sync.Mutex
	evs []leaserouter.Event
}

func (l *raceEventLog) add(e leaserouter.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *raceEventLog) all() []leaserouter.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

func (l *raceEventLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.evs)
}

// raceFailures collects problems seen on goroutines other than the test's.
type raceFailures struct {
	mu   sync.Mutex
	msgs []string
}

func (f *raceFailures) addf(format string, args ...any) {
	f.mu.Lock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *raceFailures) require(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Empty(t, f.msgs)
}

// raceCheckLost reports err unless it is the *LeaseLostError of l.
func raceCheckLost(f *raceFailures, what string, l *leaserouter.Lease[string], err error) {
	var lle *leaserouter.LeaseLostError
	switch {
	case !errors.Is(err, leaserouter.ErrLeaseLost) || !errors.As(err, &lle):
		f.addf("%s on lease %s/%d: got %v, want a *LeaseLostError", what, l.JobID, l.Token, err)
	case lle.JobID != l.JobID || lle.Token != l.Token:
		f.addf("%s on lease %s/%d: LeaseLostError names %s/%d", what, l.JobID, l.Token, lle.JobID, lle.Token)
	}
}

// raceOp is one lease operation that succeeded, keyed by the event it must
// have produced.
type raceOp struct {
	kind  leaserouter.EventKind
	job   string
	token leaserouter.Token
}

type raceOps struct {
	mu sync.Mutex
	n  map[raceOp]int
}

func (o *raceOps) add(kind leaserouter.EventKind, l *leaserouter.Lease[string]) {
	o.mu.Lock()
	if o.n == nil {
		o.n = make(map[raceOp]int)
	}
	o.n[raceOp{kind, l.JobID, l.Token}]++
	o.mu.Unlock()
}

var errRaceAllTerminal = errors.New("every job is terminal")

// TestRaceMixed runs producers, workers (acquiring, heartbeating, failing,
// releasing, abandoning, completing), zombies replaying old leases and a
// canceller against one Router, then checks the event stream, the states
// and the totals against one another.
func TestRaceMixed(t *testing.T) {
	const (
		producers   = 4
		perProducer = 100
		workers     = 8
		zombies     = 2
		cancels     = 40
		total       = producers * perProducer
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	// Workers stop when the last job turns terminal (seen through events);
	// the timeout only turns a hang into a failure.
	base, cancelBase := context.WithTimeout(context.Background(), time.Minute)
	defer cancelBase()
	ctx, stop := context.WithCancelCause(base)
	defer stop(nil)

	var (
		log      raceEventLog
		fails    raceFailures
		ops      raceOps
		terminal atomic.Int64
	)
	r, err := leaserouter.New[string](leaserouter.Options{
		LeaseDuration: 5 * time.Millisecond, // abandoned leases expire quickly
		MaxAttempts:   4,
		Backoff: func(attempt int) time.Duration {
			if attempt%2 == 1 {
				return 0
			}
			return 500 * time.Microsecond
		},
		OnEvent: func(e leaserouter.Event) {
			log.add(e)
			switch e.Kind {
			case leaserouter.EventCompleted, leaserouter.EventDead, leaserouter.EventCanceled:
				if terminal.Add(1) == total {
					stop(errRaceAllTerminal)
				}
			}
		},
	})
	require.NoError(t, err)
	defer r.Close(context.Background())

	jobID := func(p, k int) string { return fmt.Sprintf("p%d-%d", p, k) }
	zch := make(chan *leaserouter.Lease[string], 256)
	handOver := func(l *leaserouter.Lease[string]) {
		select {
		case zch <- l:
		default: // the zombies have plenty
		}
	}
	// try records a successful operation or checks its refusal.
	try := func(kind leaserouter.EventKind, l *leaserouter.Lease[string], err error) {
		if err == nil {
			ops.add(kind, l)
			return
		}
		raceCheckLost(&fails, kind.String(), l, err)
	}

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(100+p)))
			for k := range perProducer {
				var opts []leaserouter.EnqueueOption
				if rng.IntN(10) == 0 {
					opts = append(opts, leaserouter.WithDelay(time.Millisecond))
				}
				if rng.IntN(4) == 0 {
					opts = append(opts, leaserouter.WithPriority(rng.IntN(3)))
				}
				if err := r.Enqueue(jobID(p, k), jobID(p, k), opts...); err != nil {
					fails.addf("Enqueue %s: %v", jobID(p, k), err)
				}
				if k%8 == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(200+w)))
			id := fmt.Sprintf("w%d", w)
			for {
				var l *leaserouter.Lease[string]
				var err error
				if rng.IntN(2) == 0 {
					l, err = r.TryAcquire(id)
				}
				if l == nil && (err == nil || errors.Is(err, leaserouter.ErrNoJob)) {
					l, err = r.Acquire(ctx, id)
				}
				if err != nil {
					if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
						fails.addf("worker %s: acquire: %v", id, err)
					}
					return
				}
				if l.Payload != l.JobID || l.WorkerID != id || l.Token == 0 || l.Attempt < 1 {
					fails.addf("worker %s: bad lease %+v", id, *l)
				}
				for i := range rng.IntN(3) {
					try(leaserouter.EventLeaseExtended, l, l.Heartbeat([]byte{byte(i)}))
				}
				switch p := rng.IntN(100); {
				case p < 45:
					try(leaserouter.EventCompleted, l, l.Complete())
				case p < 58:
					try(leaserouter.EventFailed, l, l.Fail(errors.New("boom")))
				case p < 61:
					try(leaserouter.EventFailed, l, l.Fail(leaserouter.Permanent(errors.New("fatal"))))
				case p < 73:
					try(leaserouter.EventReleased, l, l.Release())
				case p < 88:
					continue // abandoned: the lease expires
				default:
					handOver(l) // abandoned to a zombie, which may still use it
					continue
				}
				if rng.IntN(5) == 0 {
					handOver(l)
				}
			}
		})
	}
	wg.Go(func() { // the canceller
		rng := rand.New(rand.NewPCG(seed, 300))
		for range cancels {
			id := jobID(rng.IntN(producers), rng.IntN(perProducer))
			if err := r.Cancel(id); err != nil && !errors.Is(err, leaserouter.ErrNotFound) {
				fails.addf("Cancel %s: %v", id, err)
			}
			runtime.Gosched()
		}
	})
	var zwg sync.WaitGroup
	held := make([][]*leaserouter.Lease[string], zombies)
	for z := range zombies {
		zwg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(400+z)))
			for l := range zch {
				held[z] = append(held[z], l)
				old := held[z][rng.IntN(len(held[z]))]
				switch rng.IntN(4) {
				case 0:
					try(leaserouter.EventCompleted, old, old.Complete())
				case 1:
					try(leaserouter.EventLeaseExtended, old, old.Heartbeat(nil))
				case 2:
					try(leaserouter.EventFailed, old, old.Fail(errors.New("zombie")))
				case 3:
					try(leaserouter.EventReleased, old, old.Release())
				}
			}
		})
	}
	wg.Wait()
	close(zch)
	zwg.Wait()
	fails.require(t)
	require.ErrorIs(t, context.Cause(ctx), errRaceAllTerminal, "workers stopped before every job was terminal: %+v", r.Stats())

	st := r.Stats()
	require.Zero(t, st.Pending+st.Scheduled+st.Leased, "%+v", st)

	// Every job is terminal, so every lease a zombie holds is dead, before
	// Close and after it.
	var zombieLeases []*leaserouter.Lease[string]
	for _, h := range held {
		zombieLeases = append(zombieLeases, h...)
	}
	for _, l := range zombieLeases {
		raceCheckLost(&fails, "Complete", l, l.Complete())
		raceCheckLost(&fails, "Heartbeat", l, l.Heartbeat(nil))
		raceCheckLost(&fails, "Fail", l, l.Fail(nil))
		raceCheckLost(&fails, "Release", l, l.Release())
	}
	require.NoError(t, r.Close(context.Background()))
	for _, l := range zombieLeases[:min(len(zombieLeases), 10)] {
		raceCheckLost(&fails, "Complete after Close", l, l.Complete())
	}
	fails.require(t)
	require.NoError(t, r.Audit())

	evs := log.all()
	st = r.Stats()
	var ids []string
	for p := range producers {
		for k := range perProducer {
			ids = append(ids, jobID(p, k))
		}
	}
	count := raceReconcile(t, r, evs, &ops, ids, st)
	require.Zero(t, st.Duplicates)

	// The run exercised what it is about.
	require.NotZero(t, count[leaserouter.EventCompleted])
	require.NotZero(t, count[leaserouter.EventLeaseExpired])
	require.NotZero(t, count[leaserouter.EventStaleRejected])
	t.Logf("events %d: %v; stats %+v", len(evs), count, st)
}

// raceCheckStream checks the token story of an event stream and returns
// the number of events of each kind:
//   - lease_acquired tokens are strictly increasing over the whole stream
//     (one Router) and so per job, and Attempt counts the job's leases;
//   - after a job's lease_acquired with token t, every event of that job
//     that names a token names t, except stale_rejected, which names a
//     token the job was granted earlier (or t) and carries its
//     *LeaseLostError;
//   - a job has one terminal event (completed, dead, canceled) and after it
//     only stale_rejected, duplicate (dedup while retained) or purged.
func raceCheckStream(t *testing.T, evs []leaserouter.Event) map[leaserouter.EventKind]int {
	t.Helper()
	count := make(map[leaserouter.EventKind]int)
	latest := make(map[string]leaserouter.Token)
	granted := make(map[string]map[leaserouter.Token]bool)
	attempts := make(map[string]int)
	finished := make(map[string]bool)
	var last leaserouter.Token
	for i, e := range evs {
		count[e.Kind]++
		at := fmt.Sprintf("event %d %v: %+v", i, e.Kind, e)
		switch e.Kind {
		case leaserouter.EventLeaseAcquired:
			require.Greater(t, e.Token, last, at)
			require.Greater(t, e.Token, latest[e.JobID], at)
			last, latest[e.JobID] = e.Token, e.Token
			if granted[e.JobID] == nil {
				granted[e.JobID] = make(map[leaserouter.Token]bool)
			}
			granted[e.JobID][e.Token] = true
			attempts[e.JobID]++
			require.Equal(t, attempts[e.JobID], e.Attempt, at)
		case leaserouter.EventStaleRejected:
			require.True(t, granted[e.JobID][e.Token], "%s: token never granted to the job", at)
			require.LessOrEqual(t, e.Token, latest[e.JobID], at)
			var lle *leaserouter.LeaseLostError
			require.ErrorAs(t, e.Err, &lle, at)
			require.Equal(t, e.Token, lle.Token, at)
			require.Equal(t, e.JobID, lle.JobID, at)
		case leaserouter.EventCompleted, leaserouter.EventFailed, leaserouter.EventReleased,
			leaserouter.EventLeaseExtended, leaserouter.EventLeaseExpired:
			require.NotZero(t, e.Token, at)
			require.Equal(t, latest[e.JobID], e.Token, "%s: not the job's latest lease", at)
		default:
			if e.Token != 0 {
				require.Equal(t, latest[e.JobID], e.Token, "%s: not the job's latest lease", at)
			}
		}
		if finished[e.JobID] {
			require.Contains(t, []leaserouter.EventKind{leaserouter.EventStaleRejected, leaserouter.EventDuplicate, leaserouter.EventPurged}, e.Kind,
				"%s: after the job's terminal event", at)
		}
		switch e.Kind {
		case leaserouter.EventCompleted, leaserouter.EventDead, leaserouter.EventCanceled:
			finished[e.JobID] = true
		}
	}
	return count
}

// TestRaceCompleteSameLease: of 8 simultaneous Completes on one lease,
// exactly one succeeds.
func TestRaceCompleteSameLease(t *testing.T) {
	const rounds, callers = 50, 8
	var log raceEventLog
	r, err := leaserouter.New[string](leaserouter.Options{OnEvent: log.add})
	require.NoError(t, err)
	defer r.Close(context.Background())

	for round := range rounds {
		id := fmt.Sprintf("job-%d", round)
		require.NoError(t, r.Enqueue(id, id))
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.Equal(t, id, l.JobID)

		start := make(chan struct{})
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				<-start
				errs[c] = l.Complete()
			})
		}
		close(start)
		wg.Wait()

		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
				continue
			}
			var lle *leaserouter.LeaseLostError
			require.ErrorAs(t, err, &lle)
			require.ErrorIs(t, err, leaserouter.ErrLeaseLost)
			require.Equal(t, l.Token, lle.Token)
			require.Equal(t, id, lle.JobID)
			require.Equal(t, leaserouter.LostCompleted, lle.Reason)
		}
		require.Equal(t, 1, wins, "round %d: %v", round, errs)
		j, ok := r.Get(id)
		require.True(t, ok)
		require.Equal(t, leaserouter.StateSucceeded, j.State)
	}
	require.NoError(t, r.Close(context.Background()))
	require.NoError(t, r.Audit())

	completed := make(map[string]int)
	stale := 0
	for _, e := range log.all() {
		switch e.Kind {
		case leaserouter.EventCompleted:
			completed[e.JobID]++
		case leaserouter.EventStaleRejected:
			stale++
		}
	}
	require.Len(t, completed, rounds)
	for id, n := range completed {
		require.Equal(t, 1, n, "completed events of %s", id)
	}
	require.Equal(t, rounds*(callers-1), stale)
	st := r.Stats()
	require.Equal(t, rounds, st.Succeeded)
	require.EqualValues(t, rounds*(callers-1), st.StaleRejections)
}

// TestRaceEnqueueSameID: of 8 simultaneous Enqueues of one ID, exactly one
// is stored; the rest get ErrDuplicate and change nothing.
func TestRaceEnqueueSameID(t *testing.T) {
	const rounds, callers = 50, 8
	r, err := leaserouter.New[int](leaserouter.Options{})
	require.NoError(t, err)
	defer r.Close(context.Background())

	for round := range rounds {
		id := fmt.Sprintf("job-%d", round)
		start := make(chan struct{})
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				<-start
				errs[c] = r.Enqueue(id, c)
			})
		}
		close(start)
		wg.Wait()

		winner := -1
		for c, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "round %d: two Enqueues of %s succeeded", round, id)
				winner = c
				continue
			}
			require.ErrorIs(t, err, leaserouter.ErrDuplicate)
		}
		require.NotEqual(t, -1, winner, "round %d: no Enqueue of %s succeeded: %v", round, id, errs)
		j, ok := r.Get(id)
		require.True(t, ok)
		require.Equal(t, winner, j.Payload, "a refused Enqueue changed the job")
		require.Equal(t, leaserouter.StatePending, j.State)
	}
	require.NoError(t, r.Audit())
	st := r.Stats()
	require.EqualValues(t, rounds, st.Enqueued)
	require.EqualValues(t, rounds*(callers-1), st.Duplicates)
	require.Equal(t, rounds, st.Pending)
}

// TestRaceCancelVsAcquire races cancellers against acquirers over the same
// jobs in the same order: each job ends canceled (any lease on it refused
// from then on) or leased once and completed.
func TestRaceCancelVsAcquire(t *testing.T) {
	const jobs, acquirers = 300, 4
	var log raceEventLog
	r, err := leaserouter.New[string](leaserouter.Options{OnEvent: log.add})
	require.NoError(t, err)
	defer r.Close(context.Background())

	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%03d", i)
		require.NoError(t, r.Enqueue(ids[i], ids[i]))
	}

	type outcome struct {
		l   *leaserouter.Lease[string]
		err error // of Complete
	}
	var (
		mu    sync.Mutex
		got   = make(map[string][]outcome)
		fails raceFailures
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for a := range acquirers {
		wg.Go(func() {
			<-start
			w := fmt.Sprintf("w%d", a)
			for i := 0; ; i++ {
				// Nothing ever goes back to pending here (no expiry within
				// the default 30s lease, no Fail or Release), so the first
				// ErrNoJob means no job will be ready again.
				l, err := r.TryAcquire(w)
				if errors.Is(err, leaserouter.ErrNoJob) {
					return
				}
				if err != nil {
					fails.addf("TryAcquire: %v", err)
					return
				}
				if i%2 == 0 {
					runtime.Gosched() // widen the window for Cancel
				}
				err = l.Complete()
				mu.Lock()
				got[l.JobID] = append(got[l.JobID], outcome{l, err})
				mu.Unlock()
			}
		})
	}
	for c := range 2 {
		wg.Go(func() {
			<-start
			for i := c; i < jobs; i += 2 {
				if err := r.Cancel(ids[i]); err != nil {
					fails.addf("Cancel %s: %v", ids[i], err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	fails.require(t)

	refused, canceled := 0, 0
	for _, id := range ids {
		j, ok := r.Get(id)
		require.True(t, ok, id)
		outs := got[id]
		require.LessOrEqual(t, len(outs), 1, "job %s leased twice", id)
		switch j.State {
		case leaserouter.StateSucceeded:
			require.Len(t, outs, 1, "job %s succeeded without a lease", id)
			require.NoError(t, outs[0].err, id)
			require.Equal(t, outs[0].l.Token, j.Token)
		case leaserouter.StateCanceled:
			canceled++
			if len(outs) == 0 {
				require.Zero(t, j.Token, id)
				break
			}
			l := outs[0].l
			refused++
			var lle *leaserouter.LeaseLostError
			require.ErrorAs(t, outs[0].err, &lle, id)
			require.Equal(t, leaserouter.LostCanceled, lle.Reason, id)
			require.Equal(t, l.Token, j.Token, id)
			require.Empty(t, j.Owner, id)
			for _, err := range []error{l.Heartbeat(nil), l.Complete(), l.Fail(nil), l.Release()} {
				require.ErrorIs(t, err, leaserouter.ErrLeaseLost, id)
				refused++
			}
		default:
			require.Failf(t, "bad final state", "job %s is %v", id, j.State)
		}
	}
	require.NoError(t, r.Audit())
	require.NoError(t, r.Close(context.Background()))

	// A canceled event names the lease it ended, if any.
	leased := make(map[string]leaserouter.Token)
	for _, e := range log.all() {
		switch e.Kind {
		case leaserouter.EventLeaseAcquired:
			leased[e.JobID] = e.Token
		case leaserouter.EventCanceled:
			if outs := got[e.JobID]; len(outs) > 0 {
				require.Equal(t, outs[0].l.Token, e.Token, "%+v", e)
				require.Equal(t, outs[0].l.WorkerID, e.WorkerID, "%+v", e)
			} else {
				require.Zero(t, e.Token, "%+v", e)
			}
		}
	}
	require.Len(t, leased, len(got))
	st := r.Stats()
	require.Equal(t, jobs, st.Succeeded+st.Canceled)
	require.Equal(t, canceled, st.Canceled)
	require.EqualValues(t, len(got), st.LeasesGranted)
	require.EqualValues(t, refused, st.StaleRejections)
	t.Logf("canceled %d (leased first: %d), succeeded %d", st.Canceled, refused/5, st.Succeeded)
}

// TestRaceRunAndClose closes a Router while Run's workers are busy with a
// stream of jobs whose handlers sometimes fail or panic.
func TestRaceRunAndClose(t *testing.T) {
	// drain: every handler returns soon; Close waits for the leases.
	t.Run("drain", func(t *testing.T) { raceRunAndClose(t, false) })
	// revoke: every worker is stuck in a handler waiting for its ctx; Close
	// with a done ctx revokes the leases, which cancels the handlers.
	t.Run("revoke", func(t *testing.T) { raceRunAndClose(t, true) })
}

func raceRunAndClose(t *testing.T, revoke bool) {
	const jobs, workers, closeAfter = 200, 4, 40
	var (
		log       raceEventLog
		fails     raceFailures
		completed atomic.Int64
		blocked   atomic.Int64
		trigger   = make(chan struct{})
		causesMu  sync.Mutex
		causes    []error
		wg        sync.WaitGroup
		runErr    = make(chan error, 1)
	)
	r, err := leaserouter.New[int](leaserouter.Options{
		LeaseDuration: time.Minute, // no lease expires by accident under -race
		MaxAttempts:   3,
		Backoff:       func(int) time.Duration { return 0 },
		OnEvent: func(e leaserouter.Event) {
			log.add(e)
			if !revoke && e.Kind == leaserouter.EventCompleted && completed.Add(1) == closeAfter {
				close(trigger)
			}
		},
	})
	require.NoError(t, err)
	defer r.Close(context.Background())

	h := func(ctx context.Context, l *leaserouter.Lease[int]) error {
		n := l.Payload
		if revoke && n%5 == 0 {
			if blocked.Add(1) == workers { // every worker is in here now
				close(trigger)
			}
			<-ctx.Done()
			causesMu.Lock()
			causes = append(causes, context.Cause(ctx))
			causesMu.Unlock()
			return context.Cause(ctx)
		}
		switch (n + l.Attempt) % 6 {
		case 0:
			return errors.New("handler error")
		case 1:
			panic(fmt.Sprintf("handler panic on job %d", n))
		case 2:
			return leaserouter.Permanent(errors.New("permanent"))
		}
		runtime.Gosched()
		return nil
	}
	go func() {
		runErr <- r.Run(context.Background(), leaserouter.WorkerOptions{Workers: workers, WorkerID: "run"}, h)
	}()
	wg.Go(func() {
		for i := range jobs {
			err := r.Enqueue(fmt.Sprint(i), i)
			if errors.Is(err, leaserouter.ErrClosed) {
				return
			}
			if err != nil {
				fails.addf("Enqueue %d: %v", i, err)
			}
		}
	})

	<-trigger
	closeCtx := context.Background()
	if revoke {
		c, cancel := context.WithCancel(context.Background())
		cancel()
		closeCtx = c
	}
	err = r.Close(closeCtx)
	// A second Close waits for the delivery the first one, cut short, did
	// not wait for.
	require.NoError(t, r.Close(context.Background()))
	atClose := log.all()
	if revoke {
		require.ErrorIs(t, err, context.Canceled, "Close cut short must return ctx.Err()")
	} else {
		require.NoError(t, err)
	}
	require.NoError(t, <-runErr)
	wg.Wait()
	fails.require(t)

	require.ErrorIs(t, r.Enqueue("late", 0), leaserouter.ErrClosed)
	_, err = r.TryAcquire("late")
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	require.NoError(t, r.Audit())
	st := r.Stats()
	require.Zero(t, st.Leased, "%+v", st)

	var revoked []leaserouter.Token
	for _, e := range atClose {
		if e.Kind == leaserouter.EventReleased && errors.Is(e.Err, leaserouter.ErrClosed) {
			revoked = append(revoked, e.Token)
			j, ok := r.Get(e.JobID)
			require.True(t, ok)
			require.Equal(t, leaserouter.StatePending, j.State, "a revoked job goes back to pending")
			require.Equal(t, e.Attempt, j.Attempt, "revocation keeps the attempt count")
		}
	}
	final := log.all()
	if revoke {
		// The leases of the stuck handlers, and any their workers had
		// leased ahead in a batch that Close, with its ctx done already,
		// revoked before Run's heartbeat goroutine could hand them back.
		require.GreaterOrEqual(t, len(revoked), workers)
		causesMu.Lock()
		require.Len(t, causes, workers)
		for _, c := range causes {
			require.ErrorIs(t, c, leaserouter.ErrLeaseLost)
		}
		causesMu.Unlock()
		// Run's workers may still call Fail on their revoked leases after
		// Close returned: those refusals are the only later events.
		for _, e := range final[len(atClose):] {
			require.Equal(t, leaserouter.EventStaleRejected, e.Kind, "event after Close: %+v", e)
			require.Contains(t, revoked, e.Token, "event after Close: %+v", e)
		}
		require.LessOrEqual(t, len(final)-len(atClose), workers)
	} else {
		require.Empty(t, revoked)
		require.Len(t, final, len(atClose), "events delivered after Close returned: %+v", final[len(atClose):])
	}
	// The state is frozen: reading it emits nothing.
	for i := range jobs {
		if j, ok := r.Get(fmt.Sprint(i)); ok {
			require.NotEqual(t, leaserouter.StateLeased, j.State)
		}
	}
	require.Equal(t, st, r.Stats())
	require.NoError(t, r.Close(context.Background()), "second Close")
	require.Equal(t, len(final), log.len())

	count := raceCheckStream(t, final)
	require.EqualValues(t, count[leaserouter.EventLeaseAcquired], st.LeasesGranted)
	require.EqualValues(t, count[leaserouter.EventStaleRejected], st.StaleRejections)
	require.EqualValues(t, count[leaserouter.EventDead], st.Dead)
	require.Equal(t, count[leaserouter.EventCompleted], st.Succeeded)
	t.Logf("events %d (after Close %d): %v", len(final), len(final)-len(atClose), count)
}

// raceReconcile checks a finished run against its event stream, for the
// suites that end with every job terminal (TestRaceMixed, TestChaosSoak):
// the token story of every job (raceCheckStream); every successful lease
// operation produced its event and every such event came from one; no job
// lost, none completed twice, each enqueued once and in the state of its
// one terminal event; and the totals of st agree with the events. It
// returns the events counted by kind.
func raceReconcile(t *testing.T, r *router, evs []leaserouter.Event, ops *raceOps, ids []string, st leaserouter.Stats) map[leaserouter.EventKind]int {
	t.Helper()
	count := raceCheckStream(t, evs)

	fromEvents := make(map[raceOp]int)
	terminal := make(map[string]leaserouter.EventKind)
	enqueued := make(map[string]int)
	for _, e := range evs {
		switch e.Kind {
		case leaserouter.EventCompleted, leaserouter.EventFailed, leaserouter.EventReleased, leaserouter.EventLeaseExtended:
			fromEvents[raceOp{e.Kind, e.JobID, e.Token}]++
		case leaserouter.EventEnqueued:
			enqueued[e.JobID]++
		}
		switch e.Kind {
		case leaserouter.EventCompleted, leaserouter.EventDead, leaserouter.EventCanceled:
			if prev, ok := terminal[e.JobID]; ok {
				require.Failf(t, "second terminal event", "%+v after %v", e, prev)
			}
			terminal[e.JobID] = e.Kind
		}
	}
	require.Equal(t, ops.n, fromEvents, "successful lease operations vs their events")
	for op, k := range ops.n {
		if op.kind == leaserouter.EventCompleted {
			require.Equal(t, 1, k, "job %s completed twice with token %d", op.job, op.token)
		}
	}
	wantState := map[leaserouter.EventKind]leaserouter.State{
		leaserouter.EventCompleted: leaserouter.StateSucceeded,
		leaserouter.EventDead:      leaserouter.StateDead,
		leaserouter.EventCanceled:  leaserouter.StateCanceled,
	}
	for _, id := range ids {
		j, ok := r.Get(id)
		require.True(t, ok, "job %s lost", id)
		require.True(t, j.State.Terminal(), "job %s is %v", id, j.State)
		require.Equal(t, 1, enqueued[id], "enqueued events of %s", id)
		kind, ok := terminal[id]
		require.True(t, ok, "job %s has no terminal event", id)
		require.Equal(t, wantState[kind], j.State, "job %s", id)
		require.Empty(t, j.Owner, id)
	}
	require.Len(t, terminal, len(ids))

	require.EqualValues(t, len(ids), st.Enqueued)
	require.EqualValues(t, count[leaserouter.EventEnqueued], st.Enqueued)
	require.EqualValues(t, count[leaserouter.EventDuplicate], st.Duplicates)
	require.EqualValues(t, count[leaserouter.EventLeaseAcquired], st.LeasesGranted)
	require.EqualValues(t, count[leaserouter.EventLeaseExtended], st.Heartbeats)
	require.EqualValues(t, count[leaserouter.EventLeaseExpired], st.Expirations)
	require.EqualValues(t, count[leaserouter.EventRetryScheduled], st.Retries)
	require.EqualValues(t, count[leaserouter.EventDead], st.Dead)
	require.EqualValues(t, count[leaserouter.EventStaleRejected], st.StaleRejections)
	require.EqualValues(t, count[leaserouter.EventPurged], st.Purged)
	require.Equal(t, count[leaserouter.EventCompleted], st.Succeeded)
	require.Equal(t, count[leaserouter.EventDead], st.DeadJobs)
	require.Equal(t, count[leaserouter.EventCanceled], st.Canceled)
	require.Equal(t, len(ids), st.Succeeded+st.DeadJobs+st.Canceled)
	return count
}
