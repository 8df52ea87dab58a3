package leaserouter_test

// Races, three ways:
//
//   - TestRace*: real concurrency under -race. Every test is bounded by a
//     fixed number of operations, never by a duration, and waits on signals
//     (events, channels, contexts), never on sleeps. Assertions come after
//     the goroutines have ended; goroutines report problems through
//     raceFailures instead of calling require off the test goroutine.
//   - TestHarness*: a deterministic race harness. Each scenario runs in a
//     testing/synctest bubble and forces its interleaving exactly — with
//     gates (goroutines held on channels until the test opens them), the
//     reaper's ReaperChose hook and a context that runs a step when Acquire
//     consults it — so both orders of a race are reproduced every run.
//   - TestChaosSoak: a few seconds of real-time chaos (crashes, stalls past
//     expiry, failures, releases, cancels) checked against the event stream.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/hook"
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
	count := raceCheckStream(t, evs)

	// Every successful operation produced exactly one event with its token,
	// and every such event came from one (raceCheckStream showed the token
	// was the job's latest lease_acquired's at that point).
	fromEvents := make(map[raceOp]int)
	for _, e := range evs {
		switch e.Kind {
		case leaserouter.EventCompleted, leaserouter.EventFailed, leaserouter.EventReleased, leaserouter.EventLeaseExtended:
			fromEvents[raceOp{e.Kind, e.JobID, e.Token}]++
		}
	}
	require.Equal(t, ops.n, fromEvents, "successful lease operations vs their events")

	// Every job was enqueued once and is terminal in the state its one
	// terminal event says.
	terminalKind := make(map[string]leaserouter.EventKind)
	enqueued := make(map[string]int)
	for _, e := range evs {
		switch e.Kind {
		case leaserouter.EventCompleted, leaserouter.EventDead, leaserouter.EventCanceled:
			terminalKind[e.JobID] = e.Kind
		case leaserouter.EventEnqueued:
			enqueued[e.JobID]++
		}
	}
	want := map[leaserouter.EventKind]leaserouter.State{
		leaserouter.EventCompleted: leaserouter.StateSucceeded,
		leaserouter.EventDead:      leaserouter.StateFailed,
		leaserouter.EventCanceled:  leaserouter.StateCanceled,
	}
	for p := range producers {
		for k := range perProducer {
			id := jobID(p, k)
			j, ok := r.Get(id)
			require.True(t, ok, id)
			require.True(t, j.State.Terminal(), "job %s is %v", id, j.State)
			require.Equal(t, 1, enqueued[id], "enqueued events of %s", id)
			require.Contains(t, terminalKind, id)
			require.Equal(t, want[terminalKind[id]], j.State, "job %s", id)
			require.Empty(t, j.Owner, id)
		}
	}
	require.Len(t, terminalKind, total)

	// Totals agree with the events.
	require.EqualValues(t, total, st.Enqueued)
	require.EqualValues(t, count[leaserouter.EventEnqueued], st.Enqueued)
	require.Zero(t, st.Duplicates)
	require.EqualValues(t, count[leaserouter.EventLeaseAcquired], st.LeasesGranted)
	require.EqualValues(t, count[leaserouter.EventLeaseExtended], st.Heartbeats)
	require.EqualValues(t, count[leaserouter.EventLeaseExpired], st.Expirations)
	require.EqualValues(t, count[leaserouter.EventRetryScheduled], st.Retries)
	require.EqualValues(t, count[leaserouter.EventDead], st.Dead)
	require.EqualValues(t, count[leaserouter.EventStaleRejected], st.StaleRejections)
	require.EqualValues(t, count[leaserouter.EventPurged], st.Purged)
	require.Equal(t, count[leaserouter.EventCompleted], st.Succeeded)
	require.Equal(t, count[leaserouter.EventDead], st.Failed)
	require.Equal(t, count[leaserouter.EventCanceled], st.Canceled)
	require.Equal(t, total, st.Succeeded+st.Failed+st.Canceled)

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

// TestRaceFence: concurrent Do calls on one key with random tokens. The
// writes that run are serial and in non-decreasing token order; every
// refusal is a *StaleTokenError naming a higher token.
func TestRaceFence(t *testing.T) {
	const goroutines, per = 16, 100
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	errWrite := errors.New("write failed")

	var (
		f        leaserouter.Fence
		writes   []leaserouter.Token // appended only inside Do's write: the Fence serialises them
		ok       atomic.Int64
		failed   atomic.Int64
		refused  atomic.Int64
		fails    raceFailures
		wg       sync.WaitGroup
		start    = make(chan struct{})
		otherKey atomic.Int64 // writes on an independent key, never refused
	)
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			<-start
			for i := range per {
				// Tokens drift upwards with overlap between goroutines, so
				// both admissions and refusals are common.
				tok := leaserouter.Token(1 + 8*i + rng.IntN(64))
				fail := rng.IntN(10) == 0
				err := f.Do("k", tok, func() error {
					writes = append(writes, tok)
					if fail {
						return errWrite
					}
					return nil
				})
				var ste *leaserouter.StaleTokenError
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, errWrite):
					failed.Add(1)
				case errors.As(err, &ste) && errors.Is(err, leaserouter.ErrStaleToken):
					refused.Add(1)
					if ste.Key != "k" || ste.Token != tok || ste.Highest <= tok {
						fails.addf("token %d refused with %+v", tok, *ste)
					}
				default:
					fails.addf("token %d: unexpected %v", tok, err)
				}
				// Each goroutine's own key only ever sees its own rising tokens.
				own := fmt.Sprintf("own-%d", g)
				if err := f.Do(own, leaserouter.Token(otherKey.Add(1)), func() error { return nil }); err != nil {
					fails.addf("Do on %s: %v", own, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	fails.require(t)

	require.True(t, slices.IsSorted(writes), "writes out of token order: %v", writes)
	require.EqualValues(t, ok.Load()+failed.Load(), len(writes))
	require.EqualValues(t, goroutines*per, len(writes)+int(refused.Load()))
	require.NotEmpty(t, writes)
	highest := writes[len(writes)-1]
	require.NoError(t, f.Admit("k", highest))
	var ste *leaserouter.StaleTokenError
	require.ErrorAs(t, f.Admit("k", highest-1), &ste)
	require.Equal(t, highest, ste.Highest)
	t.Logf("%d writes (%d failed), %d refused", len(writes), failed.Load(), refused.Load())
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
		require.Len(t, revoked, workers)
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

// ---------------------------------------------------------------------------
// Deterministic race harness (TestHarness*)

// harnessGates runs one call per goroutine, each held at its own gate until
// the test opens it, so the test decides the order the calls run in.
type harnessGates struct {
	gates []chan struct{}
	errs  []error
	wg    sync.WaitGroup
}

func harnessStart(n int, call func(i int) error) *harnessGates {
	g := &harnessGates{gates: make([]chan struct{}, n), errs: make([]error, n)}
	for i := range n {
		g.gates[i] = make(chan struct{})
		g.wg.Go(func() {
			<-g.gates[i]
			g.errs[i] = call(i)
		})
	}
	return g
}

// inOrder runs the calls one after another in the given order: each call
// has returned (and its events are delivered) before the next starts.
func (g *harnessGates) inOrder(order ...int) []error {
	for _, i := range order {
		close(g.gates[i])
		synctest.Wait()
	}
	g.wg.Wait()
	return g.errs
}

// atOnce opens every gate together and lets the scheduler pick the order.
func (g *harnessGates) atOnce() []error {
	for _, c := range g.gates {
		close(c)
	}
	g.wg.Wait()
	synctest.Wait()
	return g.errs
}

// harnessRun runs the calls in order, or at once for a nil order.
func (g *harnessGates) run(order []int) []error {
	if order == nil {
		return g.atOnce()
	}
	return g.inOrder(order...)
}

// harnessOrders gives forced orders of n calls (identity, reverse, a fixed
// shuffle) followed by `free` nil orders (all at once).
func harnessOrders(n, free int) [][]int {
	fwd := make([]int, n)
	for i := range fwd {
		fwd[i] = i
	}
	rev := slices.Clone(fwd)
	slices.Reverse(rev)
	orders := [][]int{fwd, rev}
	if n > 2 {
		orders = append(orders, rand.New(rand.NewPCG(1, 2)).Perm(n))
	}
	return append(orders, make([][]int, free)...)
}

// harnessWinner returns the index of the one nil error, failing unless
// exactly one call succeeded; with a forced order the first call must win.
func harnessWinner(t *testing.T, errs []error, order []int) int {
	t.Helper()
	win := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, win, "two calls succeeded (%d and %d): %v", win, i, errs)
			win = i
		}
	}
	require.NotEqual(t, -1, win, "no call succeeded: %v", errs)
	if order != nil {
		require.Equal(t, order[0], win, "in a forced order the first call wins: order %v, errs %v", order, errs)
	}
	return win
}

// harnessChoice is what the reaper chose: an expired lease of a job.
type harnessChoice struct {
	id    string
	token leaserouter.Token
}

// harnessReaper holds the reaper in its ReaperChose hook — after it chose
// an expired lease, before it requeues it, with the router's lock free —
// until release. Install it with SetHooks(r, &hook.Hooks{ReaperChose: h.chose}).
type harnessReaper struct {
	chosen  chan harnessChoice
	proceed chan struct{}
	release func()
}

// newHarnessReaper must be called after setup: its cleanup (release) then
// runs before setup's Close, which waits for the reaper.
func newHarnessReaper(t *testing.T) *harnessReaper {
	h := &harnessReaper{chosen: make(chan harnessChoice, 64), proceed: make(chan struct{})}
	h.release = sync.OnceFunc(func() { close(h.proceed) })
	t.Cleanup(h.release)
	return h
}

func (h *harnessReaper) chose(id string, token uint64) {
	h.chosen <- harnessChoice{id, leaserouter.Token(token)}
	<-h.proceed
}

// harnessCtx is a context.Context the test steers: cancel ends it, and
// onConsult makes the next call of Err or Done run a step first. Acquire
// consults its ctx before each attempt ("a done ctx never gets a job"), so
// a step lands inside Acquire after its waiter was woken for a job and
// before it takes the router's lock to be granted one. It keeps the Context
// contract: Err is nil until Done is closed.
type harnessCtx struct {
	mu      sync.Mutex
	done    chan struct{}
	err     error
	consult func()
}

func newHarnessCtx() *harnessCtx { return &harnessCtx{done: make(chan struct{})} }

func (c *harnessCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *harnessCtx) Value(any) any               { return nil }

func (c *harnessCtx) Done() <-chan struct{} {
	c.fire()
	return c.done
}

func (c *harnessCtx) Err() error {
	c.fire()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *harnessCtx) onConsult(step func()) {
	c.mu.Lock()
	c.consult = step
	c.mu.Unlock()
}

func (c *harnessCtx) fire() {
	c.mu.Lock()
	step := c.consult
	c.consult = nil
	c.mu.Unlock()
	if step != nil {
		step()
	}
}

func (c *harnessCtx) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// harnessLost describes how err fails to be the refusal of lease l with
// the job's current token and the reason given; "" if it is that refusal.
func harnessLost(err error, l *lease, current leaserouter.Token, reason string) string {
	var lle *leaserouter.LeaseLostError
	if !errors.Is(err, leaserouter.ErrLeaseLost) || !errors.As(err, &lle) {
		return fmt.Sprintf("lease %s/%d: got %v, want a *LeaseLostError", l.JobID, l.Token, err)
	}
	want := leaserouter.LeaseLostError{JobID: l.JobID, Token: l.Token, Current: current, Reason: leaserouter.LostReason(reason)}
	if *lle != want {
		return fmt.Sprintf("lease %s/%d: got %+v, want %+v", l.JobID, l.Token, *lle, want)
	}
	return ""
}

func harnessTokens(evs []leaserouter.Event) []leaserouter.Token {
	out := make([]leaserouter.Token, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Token)
	}
	return out
}

// harnessStaleOps are the lease operations a stale holder tries, in order.
var harnessStaleOps = []struct {
	name string
	do   func(*lease) error
}{
	{"Complete", (*lease).Complete},
	{"Fail", func(l *lease) error { return l.Fail(errors.New("harness: stale")) }},
	{"Release", (*lease).Release},
	{"Heartbeat", func(l *lease) error { return l.Heartbeat([]byte("stale")) }},
}

// TestHarnessStaleCompletionAfterReacquire (seed 001): worker A leases a
// job, writes downstream through a Fence, then stalls past its expiry; B
// re-acquires with a higher token and writes; A wakes believing it still
// holds the job. A's Complete, Fail, Release and Heartbeat are refused
// with LeaseLostError{Token: a, Current: b}, the Fence blocks A's write
// after B's, and B's lease is untouched. Forced both ways: the reaper
// settles A's expiry first, or is held between choosing A's lease and
// requeueing it while B's acquire settles it.
func TestHarnessStaleCompletionAfterReacquire(t *testing.T) {
	for _, held := range []bool{false, true} {
		name := map[bool]string{false: "reaper-first", true: "reaper-held"}[held]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bad := harnessStale(t, held, false)
				require.Empty(t, bad)
			})
		})
	}
}

// TestHarnessStaleCompletionPlantedBug shows the checks above can fail:
// with the token check skipped, A's stale Complete finishes B's job.
func TestHarnessStaleCompletionPlantedBug(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := harnessStale(t, false, true)
		require.NotEmpty(t, bad)
		require.Contains(t, bad[0], "Complete:", "the stale Complete is the first thing caught: %q", bad)
		t.Logf("planted bug caught: %d problems, first: %s", len(bad), bad[0])
	})
}

// harnessStale plays seed 001 and returns what went wrong instead of
// failing, so that the planted-bug test can show each check can fail.
// Steps that do not depend on the token check use require.
func harnessStale(t *testing.T, held, bug bool) []string {
	var bad []string
	badf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	rec := &recorder{}
	r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: hourBackoff, OnEvent: rec.record})
	hooks := &hook.Hooks{}
	if bug {
		leaserouter.PlantSkipTokenCheck(r)
	}
	hr := newHarnessReaper(t)
	if held {
		hooks.ReaperChose = hr.chose
	}
	leaserouter.SetHooks(r, hooks)

	var fence leaserouter.Fence
	var writes []string // what reached the downstream resource, in order; appended under the Fence's key
	write := func(who string) func() error {
		return func() error { writes = append(writes, who); return nil }
	}

	require.NoError(t, r.Enqueue("j", "payload"))
	a := acquire(t, r, "A")
	require.NoError(t, fence.Do("j", a.Token, write("A")), "A writes while its lease is valid")

	// A stalls (a GC pause, a slow call): its next steps wait for resume.
	resume := make(chan struct{})
	wake := sync.OnceFunc(func() { close(resume) })
	t.Cleanup(wake) // a failing require must not strand A in the bubble
	staleErrs := make(chan []error, 1)
	go func() {
		<-resume
		var errs []error
		for _, op := range harnessStaleOps {
			errs = append(errs, op.do(a))
		}
		staleErrs <- append(errs, fence.Do("j", a.Token, write("A-stale")))
	}()

	sleep(ld) // A's lease ends at exactly its expiry
	if held {
		require.Equal(t, harnessChoice{"j", a.Token}, receive(t, hr.chosen), "the reaper is held after choosing A's lease")
	}
	b := acquire(t, r, "B") // with the reaper held, B's TryAcquire settles A's expiry itself
	require.Equal(t, "j", b.JobID)
	require.Greater(t, b.Token, a.Token)
	require.Equal(t, a.Attempt+1, b.Attempt)
	require.NoError(t, fence.Do("j", b.Token, write("B")))
	if held {
		settled := r.Stats()
		hr.release()
		synctest.Wait()
		require.Equal(t, settled, r.Stats(), "the released reaper re-checks and finds nothing left to do")
	}
	before, stats, bExpiry := get(t, r, "j"), r.Stats(), b.Expiry()
	require.EqualValues(t, 1, stats.Expirations)

	wake() // A wakes up and acts on its lost lease
	synctest.Wait()
	errs := receive(t, staleErrs)
	for i, op := range harnessStaleOps {
		if msg := harnessLost(errs[i], a, b.Token, "superseded"); msg != "" {
			badf("%s: %s", op.name, msg)
		}
	}
	var ste *leaserouter.StaleTokenError
	wantSTE := leaserouter.StaleTokenError{Key: "j", Token: a.Token, Highest: b.Token}
	if fenceErr := errs[len(harnessStaleOps)]; !errors.As(fenceErr, &ste) || !errors.Is(fenceErr, leaserouter.ErrStaleToken) || *ste != wantSTE {
		badf("Fence.Do: A's late write got %v, want %+v", fenceErr, wantSTE)
	}
	if !slices.Equal(writes, []string{"A", "B"}) {
		badf("downstream writes %q, want [A B]: A's write after B's must be blocked", writes)
	}
	if after := get(t, r, "j"); !reflect.DeepEqual(before, after) {
		badf("B's job changed:\nbefore %+v\nafter  %+v", before, after)
	}
	if !b.Expiry().Equal(bExpiry) {
		badf("B's expiry moved from %v to %v", bExpiry, b.Expiry())
	}
	stats.StaleRejections += uint64(len(harnessStaleOps))
	stats.HeartbeatsRefused++ // one of the ops is a heartbeat
	if got := r.Stats(); got != stats {
		badf("Stats: got %+v, want %+v", got, stats)
	}
	wantKinds := []string{"enqueued", "lease_acquired", "lease_expired", "lease_acquired",
		"stale_rejected", "stale_rejected", "stale_rejected", "stale_rejected"}
	wantTokens := []leaserouter.Token{0, a.Token, a.Token, b.Token, a.Token, a.Token, a.Token, a.Token}
	if evs := rec.of("j"); !slices.Equal(kindNames(evs), wantKinds) || !slices.Equal(harnessTokens(evs), wantTokens) {
		badf("events %q tokens %v, want %q tokens %v", kindNames(evs), harnessTokens(evs), wantKinds, wantTokens)
	}

	// B's lease is still good.
	if err := b.Heartbeat(nil); err != nil {
		badf("B's Heartbeat: %v", err)
	}
	if err := b.Complete(); err != nil {
		badf("B's Complete: %v", err)
	}
	if j := get(t, r, "j"); j.State != leaserouter.StateSucceeded || j.Token != b.Token {
		badf("final job %+v, want succeeded with B's token %d", j, b.Token)
	}
	if err := r.Audit(); err != nil {
		badf("Audit: %v", err)
	}
	return bad
}

// TestHarnessReaperRace (seed 004): the reaper is held in its ReaperChose
// hook — it has chosen an expired lease and not yet requeued it — and a
// Heartbeat or Complete lands there; or the operation lands 1ns before the
// expiry, before the reaper can choose. Either the operation won (job as it
// left it, no expiry counted) or the reaper did (operation refused, exactly
// one lease_expired, job pending — or dead with no attempts left), never a
// mix, and Stats, events and Audit agree. The clock decides which: the
// lease is valid until its expiry and lost at it, whatever the reaper is
// doing. A TryAcquire in the window gets the job, and the released reaper
// leaves the new lease alone.
func TestHarnessReaperRace(t *testing.T) {
	ops := []struct {
		name string
		do   func(*lease) error
	}{
		{"Heartbeat", func(l *lease) error { return l.Heartbeat([]byte("hb")) }},
		{"Complete", (*lease).Complete},
	}
	for _, op := range ops {
		for _, inWindow := range []bool{false, true} {
			for _, maxAtt := range []int{1, 3} {
				where := map[bool]string{false: "before-choice", true: "in-window"}[inWindow]
				t.Run(fmt.Sprintf("%s/%s/max=%d", op.name, where, maxAtt), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) { harnessReaperRace(t, op.name, op.do, inWindow, maxAtt) })
				})
			}
		}
	}
	t.Run("TryAcquire/in-window", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := &recorder{}
			r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
			hr := newHarnessReaper(t)
			leaserouter.SetHooks(r, &hook.Hooks{ReaperChose: hr.chose})
			require.NoError(t, r.Enqueue("j", ""))
			a := acquire(t, r, "A")
			sleep(ld)
			require.Equal(t, harnessChoice{"j", a.Token}, receive(t, hr.chosen))
			b := acquire(t, r, "B") // lands between the reaper's choice and its requeue
			require.Equal(t, "j", b.JobID)
			require.Equal(t, 2, b.Attempt)
			require.Greater(t, b.Token, a.Token)
			hr.release()
			synctest.Wait()

			j := get(t, r, "j")
			require.Equal(t, leaserouter.StateLeased, j.State, "the reaper must not touch the new lease")
			require.Equal(t, b.Token, j.Token)
			require.Equal(t, "B", j.Owner)
			requireTime(t, a.Expiry().Add(ld), j.LeaseExpiry, "B's expiry")
			requireTime(t, j.LeaseExpiry, b.Expiry(), "")
			st := r.Stats()
			require.EqualValues(t, 1, st.Expirations)
			require.EqualValues(t, 2, st.LeasesGranted)
			expired := rec.ofKind(leaserouter.EventLeaseExpired)
			require.Len(t, expired, 1)
			require.Equal(t, a.Token, expired[0].Token)
			require.Empty(t, harnessLost(a.Heartbeat(nil), a, b.Token, "superseded"))
			require.NoError(t, b.Complete())
			require.NoError(t, r.Audit())
		})
	})
}

func harnessReaperRace(t *testing.T, name string, do func(*lease) error, inWindow bool, maxAtt int) {
	rec := &recorder{}
	r := setup(t, leaserouter.Options{LeaseDuration: ld, MaxAttempts: maxAtt, OnEvent: rec.record})
	hr := newHarnessReaper(t)
	leaserouter.SetHooks(r, &hook.Hooks{ReaperChose: hr.chose})
	require.NoError(t, r.Enqueue("j", ""))
	a := acquire(t, r, "A")
	var err error
	var at time.Time
	if inWindow {
		sleep(ld) // the reaper wakes at the expiry, chooses A's lease and is held
		require.Equal(t, harnessChoice{"j", a.Token}, receive(t, hr.chosen))
		at = time.Now()
		err = do(a) // between the reaper's choice and its requeue
		hr.release()
		synctest.Wait() // the reaper re-checks and settles what is left
	} else {
		sleep(ld - time.Nanosecond)
		at = time.Now()
		err = do(a) // before the reaper can choose
		// The reaper wakes at the old expiry and finds nothing expired to choose.
		sleep(time.Nanosecond)
		requireBlocked(t, hr.chosen)
	}
	won := harnessReaperOutcome(t, r, rec, name, a, err, at, maxAtt)
	require.Equal(t, !inWindow, won, "valid until the expiry, lost at it: %v", err)
	if won && name == "Heartbeat" {
		// The extended lease expires in its turn, at its new expiry, once.
		sleep(time.Until(a.Expiry()))
		require.Equal(t, harnessChoice{"j", a.Token}, receive(t, hr.chosen))
		hr.release()
		synctest.Wait()
		expired := rec.ofKind(leaserouter.EventLeaseExpired)
		require.Len(t, expired, 1)
		requireTime(t, at.Add(ld), expired[0].Time, "lease_expired at the extended expiry")
		st := r.Stats()
		require.EqualValues(t, 1, st.Expirations)
		require.EqualValues(t, len(rec.ofKind(leaserouter.EventDead)), st.Dead)
		require.Equal(t, maxAtt == 1, get(t, r, "j").State == leaserouter.StateFailed)
		require.NoError(t, r.Audit())
	}
}

// harnessReaperOutcome checks the state after an operation on lease a raced
// the reaper, and reports whether the operation won.
func harnessReaperOutcome(t *testing.T, r *router, rec *recorder, name string, a *lease, err error, at time.Time, maxAtt int) bool {
	t.Helper()
	synctest.Wait() // every event delivered
	st, j := r.Stats(), get(t, r, "j")
	require.NoError(t, r.Audit())
	require.EqualValues(t, len(rec.ofKind(leaserouter.EventLeaseExpired)), st.Expirations)
	require.EqualValues(t, len(rec.ofKind(leaserouter.EventLeaseExtended)), st.Heartbeats)
	require.EqualValues(t, len(rec.ofKind(leaserouter.EventStaleRejected)), st.StaleRejections)
	require.EqualValues(t, len(rec.ofKind(leaserouter.EventDead)), st.Dead)
	require.EqualValues(t, len(rec.ofKind(leaserouter.EventCompleted)), st.Succeeded)
	require.EqualValues(t, 1, st.LeasesGranted)
	require.Equal(t, a.Token, j.Token)
	if err == nil {
		require.Zero(t, st.Expirations, "the %s won, yet the lease expired", name)
		require.Zero(t, st.StaleRejections)
		switch name {
		case "Heartbeat":
			require.Equal(t, leaserouter.StateLeased, j.State)
			require.Equal(t, "A", j.Owner)
			requireTime(t, at.Add(ld), j.LeaseExpiry, "extended from the heartbeat")
			requireTime(t, at.Add(ld), a.Expiry(), "")
			require.Equal(t, []byte("hb"), j.Progress)
			require.EqualValues(t, 1, st.Heartbeats)
		case "Complete":
			require.Equal(t, leaserouter.StateSucceeded, j.State)
			require.Equal(t, 1, st.Succeeded)
		}
		return true
	}
	require.Empty(t, harnessLost(err, a, a.Token, "expired"))
	require.EqualValues(t, 1, st.Expirations, "exactly one expiry")
	require.EqualValues(t, 1, st.StaleRejections)
	require.Zero(t, st.Heartbeats)
	require.Zero(t, st.Succeeded)
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.Owner)
	require.Nil(t, j.Progress, "the refused heartbeat stored nothing")
	want, kinds := leaserouter.StatePending, []string{"enqueued", "lease_acquired", "lease_expired", "stale_rejected"}
	if maxAtt == 1 {
		want, kinds = leaserouter.StateFailed, []string{"enqueued", "lease_acquired", "lease_expired", "dead", "stale_rejected"}
	}
	require.Equal(t, want, j.State)
	require.Equal(t, kinds, rec.kinds("j"))
	requireTime(t, a.Expiry(), rec.ofKind(leaserouter.EventLeaseExpired)[0].Time, "lease_expired at the expiry instant")
	return false
}

// harnessEnding is an operation that ends a lease, and what it leaves.
type harnessEnding struct {
	name    string
	do      func(*lease) error
	state   leaserouter.State
	reason  string   // LeaseLostError.Reason for the loser
	events  []string // the winner's events
	lastErr string
}

var harnessEndings = []harnessEnding{
	{"Complete", (*lease).Complete, leaserouter.StateSucceeded, "completed", []string{"completed"}, ""},
	{"Fail", func(l *lease) error { return l.Fail(errors.New("harness: retry")) },
		leaserouter.StateScheduled, "failed", []string{"failed", "retry_scheduled"}, "harness: retry"},
	{"FailPermanent", func(l *lease) error { return l.Fail(leaserouter.Permanent(errors.New("harness: fatal"))) },
		leaserouter.StateFailed, "failed", []string{"failed", "dead"}, "harness: fatal"},
	{"Release", (*lease).Release, leaserouter.StatePending, "released", []string{"released"}, ""},
}

// TestHarnessEndingOpsRace: two operations that end a lease (Complete,
// Fail, Fail(Permanent), Release) race on one lease. Exactly one wins —
// in a forced order the first — the loser is refused with the winner's
// reason, and the job's state, LastError and events are the winner's.
func TestHarnessEndingOpsRace(t *testing.T) {
	for x := range harnessEndings {
		for y := x + 1; y < len(harnessEndings); y++ {
			ops := [2]harnessEnding{harnessEndings[x], harnessEndings[y]}
			t.Run(ops[0].name+"-vs-"+ops[1].name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					rec := &recorder{}
					r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: hourBackoff, OnEvent: rec.record})
					orders := harnessOrders(2, 10)
					wins := [2]int{}
					for i, order := range orders {
						id := fmt.Sprintf("j%d", i)
						require.NoError(t, r.Enqueue(id, ""))
						l := acquire(t, r, "w")
						require.Equal(t, id, l.JobID)
						errs := harnessStart(2, func(k int) error { return ops[k].do(l) }).run(order)
						win := harnessWinner(t, errs, order)
						wins[win]++
						w := ops[win]
						require.Empty(t, harnessLost(errs[1-win], l, l.Token, w.reason), "%s lost to %s", ops[1-win].name, w.name)
						j := get(t, r, id)
						require.Equal(t, w.state, j.State, "%s won", w.name)
						require.Equal(t, w.lastErr, j.LastError)
						require.Equal(t, l.Token, j.Token)
						require.Empty(t, j.Owner)
						want := append(append([]string{"enqueued", "lease_acquired"}, w.events...), "stale_rejected")
						require.Equal(t, want, rec.kinds(id), "%s won", w.name)
						if !j.State.Terminal() {
							require.NoError(t, r.Cancel(id)) // out of the next round's way
						}
					}
					st := r.Stats()
					require.EqualValues(t, len(orders), st.LeasesGranted)
					require.EqualValues(t, len(orders), st.StaleRejections)
					t.Logf("at once: %s won %d, %s won %d", ops[0].name, wins[0]-1, ops[1].name, wins[1]-1)
				})
			})
		}
	}
}

// TestHarnessCompleteSameLease: eight goroutines complete one lease.
// Exactly one wins (in a forced order the first); seven are refused with
// reason "completed"; one completed event, seven stale_rejected.
func TestHarnessCompleteSameLease(t *testing.T) {
	const callers = 8
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{OnEvent: rec.record})
		orders := harnessOrders(callers, 5)
		for i, order := range orders {
			id := fmt.Sprintf("j%d", i)
			require.NoError(t, r.Enqueue(id, ""))
			l := acquire(t, r, "w")
			errs := harnessStart(callers, func(int) error { return l.Complete() }).run(order)
			win := harnessWinner(t, errs, order)
			for k, err := range errs {
				if k != win {
					require.Empty(t, harnessLost(err, l, l.Token, "completed"), "caller %d", k)
				}
			}
			j := get(t, r, id)
			require.Equal(t, leaserouter.StateSucceeded, j.State)
			require.Equal(t, l.Token, j.Token)
			want := []string{"enqueued", "lease_acquired", "completed"}
			for range callers - 1 {
				want = append(want, "stale_rejected")
			}
			require.Equal(t, want, rec.kinds(id))
		}
		st := r.Stats()
		require.Equal(t, len(orders), st.Succeeded)
		require.EqualValues(t, len(orders)*(callers-1), st.StaleRejections)
	})
}

// TestHarnessEnqueueSameID: eight goroutines enqueue one ID with different
// payloads. Exactly one is stored (in a forced order the first, with its
// payload); seven get ErrDuplicate and change nothing.
func TestHarnessEnqueueSameID(t *testing.T) {
	const callers = 8
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{OnEvent: rec.record})
		orders := harnessOrders(callers, 5)
		for i, order := range orders {
			id := fmt.Sprintf("j%d", i)
			errs := harnessStart(callers, func(k int) error { return r.Enqueue(id, fmt.Sprint("payload-", k)) }).run(order)
			win := harnessWinner(t, errs, order)
			for k, err := range errs {
				if k != win {
					require.ErrorIs(t, err, leaserouter.ErrDuplicate, "caller %d", k)
				}
			}
			j := get(t, r, id)
			require.Equal(t, fmt.Sprint("payload-", win), j.Payload, "a refused Enqueue changed the job")
			require.Equal(t, leaserouter.StatePending, j.State)
			evs := rec.of(id)
			require.Len(t, evs, callers)
			require.Equal(t, leaserouter.EventEnqueued, evs[0].Kind)
			for _, e := range evs[1:] {
				require.Equal(t, leaserouter.EventDuplicate, e.Kind)
				require.ErrorIs(t, e.Err, leaserouter.ErrDuplicate)
			}
		}
		st := r.Stats()
		require.EqualValues(t, len(orders), st.Enqueued)
		require.EqualValues(t, len(orders)*(callers-1), st.Duplicates)
		require.Equal(t, len(orders), st.Pending)
	})
}

// TestHarnessCancelVsAcquire races Cancel against acquiring one job, in
// every order: Cancel first (no lease is ever granted), acquire first (the
// lease is lost at once, refused with reason "canceled"), at once (one of
// those two, consistently), and Cancel landing inside a blocked Acquire
// after its waiter was woken for the job and before the grant (the waiter
// gets nothing, keeps waiting, and takes the next job).
func TestHarnessCancelVsAcquire(t *testing.T) {
	for _, tt := range []struct {
		name   string
		orders [][]int // of Cancel (0) and TryAcquire (1); nil: at once
	}{
		{"cancel-first", [][]int{{0, 1}}},
		{"acquire-first", [][]int{{1, 0}}},
		{"at-once", make([][]int, 20)},
	} {
		orders := tt.orders
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{OnEvent: rec.record})
				granted := 0
				for i, order := range orders {
					id := fmt.Sprintf("j%d", i)
					require.NoError(t, r.Enqueue(id, ""))
					var l *lease
					errs := harnessStart(2, func(k int) error {
						if k == 0 {
							return r.Cancel(id)
						}
						var err error
						l, err = r.TryAcquire("w")
						return err
					}).run(order)
					synctest.Wait() // events delivered
					require.NoError(t, errs[0], "Cancel")
					j := get(t, r, id)
					require.Equal(t, leaserouter.StateCanceled, j.State)
					require.Empty(t, j.Owner)
					canceled := rec.ofKind(leaserouter.EventCanceled)
					ev := canceled[len(canceled)-1]
					require.Equal(t, id, ev.JobID)
					if l == nil { // Cancel came first
						require.ErrorIs(t, errs[1], leaserouter.ErrNoJob)
						require.False(t, order != nil && order[0] == 1, "acquire first must get the job")
						require.Zero(t, j.Token)
						require.Zero(t, j.Attempt)
						require.Zero(t, ev.Token)
						require.Empty(t, ev.WorkerID)
						require.Equal(t, []string{"enqueued", "canceled"}, rec.kinds(id))
						continue
					}
					granted++
					require.NoError(t, errs[1])
					require.False(t, order != nil && order[0] == 0, "a canceled job was leased")
					require.Equal(t, id, l.JobID)
					require.Equal(t, l.Token, j.Token)
					require.Equal(t, l.Token, ev.Token, "canceled names the lease it ended")
					require.Equal(t, "w", ev.WorkerID)
					for _, op := range harnessStaleOps {
						require.Empty(t, harnessLost(op.do(l), l, l.Token, "canceled"), op.name)
					}
					synctest.Wait()
					require.Equal(t, []string{"enqueued", "lease_acquired", "canceled",
						"stale_rejected", "stale_rejected", "stale_rejected", "stale_rejected"}, rec.kinds(id))
				}
				st := r.Stats()
				require.EqualValues(t, granted, st.LeasesGranted)
				require.Equal(t, len(orders), st.Canceled)
				require.Zero(t, st.Leased+st.Pending)
				t.Logf("%d rounds, leased before the cancel in %d", len(orders), granted)
			})
		})
	}
	t.Run("cancel-between-wake-and-grant", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := &recorder{}
			r := setup(t, leaserouter.Options{OnEvent: rec.record})
			ctx := newHarnessCtx()
			ch := goAcquire(ctx, r, "w")
			synctest.Wait()
			requireBlocked(t, ch)
			canceled := make(chan error, 1)
			ctx.onConsult(func() { canceled <- r.Cancel("a") })
			require.NoError(t, r.Enqueue("a", "")) // wakes the waiter, which consults its ctx: Cancel lands there
			synctest.Wait()
			require.NoError(t, receive(t, canceled), "Acquire did not consult its ctx between wake-up and grant")
			requireBlocked(t, ch) // the job is gone: the waiter waits again
			j := get(t, r, "a")
			require.Equal(t, leaserouter.StateCanceled, j.State)
			require.Zero(t, j.Token)
			require.Equal(t, []string{"enqueued", "canceled"}, rec.kinds("a"))
			require.Zero(t, r.Stats().LeasesGranted)

			require.NoError(t, r.Enqueue("b", "")) // its wake-up was not lost with "a"
			synctest.Wait()
			res := receive(t, ch)
			require.NoError(t, res.err)
			require.Equal(t, "b", res.l.JobID)
			require.EqualValues(t, 1, r.Stats().LeasesGranted)
		})
	})
}

// TestHarnessCrashedWorker: three workers in turn lease a job, checkpoint
// and crash. Each time the job stays leased until exactly its expiry
// (expiry-1ns: leased to the crashed worker, unavailable; expiry: pending),
// and the next lease has attempt+1, a higher token and the checkpoint. At
// MaxAttempts the expiry makes the job dead, and dead never changes again:
// Cancel returns nil and changes nothing, Enqueue is a duplicate, every old
// lease is refused, and time passing changes nothing.
func TestHarnessCrashedWorker(t *testing.T) {
	const maxAtt = 3
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, MaxAttempts: maxAtt, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("j", "payload"))
		var leases []*lease
		for attempt := 1; attempt <= maxAtt; attempt++ {
			worker := fmt.Sprint("w", attempt)
			l := acquire(t, r, worker)
			require.Equal(t, attempt, l.Attempt)
			if attempt > 1 {
				prev := leases[len(leases)-1]
				require.Greater(t, l.Token, prev.Token)
				require.Equal(t, []byte(prev.WorkerID), l.Progress, "the crashed worker's checkpoint")
			}
			require.NoError(t, l.Heartbeat([]byte(worker))) // a checkpoint, then the worker crashes
			leases = append(leases, l)
			expiry := l.Expiry()

			sleep(time.Until(expiry) - time.Nanosecond)
			j := get(t, r, "j")
			require.Equal(t, leaserouter.StateLeased, j.State, "attempt %d at expiry-1ns", attempt)
			require.Equal(t, worker, j.Owner)
			require.Equal(t, l.Token, j.Token)
			requireTime(t, expiry, j.LeaseExpiry, "")
			requireNoJob(t, r)

			sleep(time.Nanosecond)
			j = get(t, r, "j")
			require.Equal(t, attempt, j.Attempt)
			require.Empty(t, j.Owner)
			require.NotEmpty(t, j.LastError)
			if attempt < maxAtt {
				require.Equal(t, leaserouter.StatePending, j.State, "attempt %d at expiry", attempt)
			} else {
				require.Equal(t, leaserouter.StateFailed, j.State, "attempts exhausted: dead at the last expiry")
			}
			for k, old := range leases {
				reason := map[bool]string{true: "expired", false: "superseded"}[k == len(leases)-1]
				require.Empty(t, harnessLost(old.Complete(), old, l.Token, reason))
			}
		}
		last := leases[len(leases)-1]
		want := []string{"enqueued"}
		for range maxAtt {
			want = append(want, "lease_acquired", "lease_extended", "lease_expired")
		}
		want = append(want, "dead")
		var kinds []string
		for _, k := range rec.kinds("j") {
			if k != "stale_rejected" {
				kinds = append(kinds, k)
			}
		}
		require.Equal(t, want, kinds)

		dead, st := get(t, r, "j"), r.Stats()
		require.Equal(t, maxAtt, dead.Attempt)
		require.Equal(t, last.Token, dead.Token)
		require.EqualValues(t, maxAtt, st.Expirations)
		require.EqualValues(t, maxAtt, st.LeasesGranted)
		require.EqualValues(t, 1, st.Dead)
		require.Equal(t, 1, st.Failed)

		// Dead never changes again.
		nEvents := len(rec.all())
		require.NoError(t, r.Cancel("j"))
		require.ErrorIs(t, r.Enqueue("j", "again"), leaserouter.ErrDuplicate)
		for k, old := range leases {
			reason := map[bool]string{true: "expired", false: "superseded"}[k == len(leases)-1]
			for _, op := range harnessStaleOps {
				require.Empty(t, harnessLost(op.do(old), old, last.Token, reason), op.name)
			}
		}
		requireNoJob(t, r)
		sleep(5 * ld)
		require.Equal(t, dead, get(t, r, "j"))
		st.Duplicates++
		st.StaleRejections += uint64(maxAtt * len(harnessStaleOps))
		st.HeartbeatsRefused += uint64(maxAtt) // one of the ops is a heartbeat
		require.Equal(t, st, r.Stats(), "only the refusals were counted")
		for _, e := range rec.all()[nEvents:] {
			require.Contains(t, []leaserouter.EventKind{leaserouter.EventDuplicate, leaserouter.EventStaleRejected}, e.Kind, "%+v", e)
		}
	})
}

// TestHarnessAcquireDeadline: a blocked Acquire with a deadline returns
// context.DeadlineExceeded at exactly the deadline (blocked at
// deadline-1ns) and swallows no job. Forced: the deadline passes before
// the job arrives (the job waits for the next taker); the job arrives
// first (the lease is returned and the deadline changes nothing); the
// deadline strikes right after the waiter was woken for the job (the
// waiter returns DeadlineExceeded and passes the job on, to the next waiter
// or the next TryAcquire). Free: a job ready exactly at the deadline is
// returned or left pending, never lost.
func TestHarnessAcquireDeadline(t *testing.T) {
	t.Run("ready-at-deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := setup(t, leaserouter.Options{})
			returned, pending := 0, 0
			for round := range 10 {
				id := fmt.Sprint("j", round)
				deadline := time.Now().Add(ld)
				require.NoError(t, r.Enqueue(id, "", leaserouter.WithRunAt(deadline)))
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				ch := goAcquire(ctx, r, "w")
				sleep(ld - time.Nanosecond)
				requireBlocked(t, ch)
				require.Equal(t, leaserouter.StateScheduled, get(t, r, id).State)
				sleep(time.Nanosecond)
				res := receive(t, ch)
				cancel()
				l := res.l
				if res.err != nil {
					pending++
					require.ErrorIs(t, res.err, context.DeadlineExceeded)
					require.Nil(t, l)
					j := get(t, r, id)
					require.Equal(t, leaserouter.StatePending, j.State, "not swallowed")
					require.Zero(t, j.Attempt)
					l = acquire(t, r, "next")
				} else {
					returned++
				}
				require.Equal(t, id, l.JobID)
				require.Equal(t, l.Token, get(t, r, id).Token)
				require.NoError(t, l.Complete())
			}
			st := r.Stats()
			require.EqualValues(t, 10, st.LeasesGranted)
			require.Equal(t, 10, st.Succeeded)
			t.Logf("a job ready exactly at the deadline: returned %d times, left pending %d times", returned, pending)
		})
	})
	t.Run("deadline-first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := setup(t, leaserouter.Options{})
			ctx := newHarnessCtx()
			late := goAcquire(ctx, r, "late")
			synctest.Wait()
			live := goAcquire(context.Background(), r, "live")
			synctest.Wait()
			ctx.cancel(context.DeadlineExceeded)
			synctest.Wait()
			res := receive(t, late)
			require.ErrorIs(t, res.err, context.DeadlineExceeded)
			require.Nil(t, res.l)
			requireBlocked(t, live)
			require.NoError(t, r.Enqueue("a", ""))
			synctest.Wait()
			res = receive(t, live)
			require.NoError(t, res.err)
			require.Equal(t, "a", res.l.JobID)
			require.EqualValues(t, 1, r.Stats().LeasesGranted)
		})
	})
	t.Run("job-first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := setup(t, leaserouter.Options{LeaseDuration: ld})
			ctx := newHarnessCtx()
			ch := goAcquire(ctx, r, "w")
			synctest.Wait()
			require.NoError(t, r.Enqueue("a", ""))
			synctest.Wait()
			ctx.cancel(context.DeadlineExceeded)
			res := receive(t, ch)
			require.NoError(t, res.err)
			require.Equal(t, "a", res.l.JobID)
			require.NoError(t, res.l.Heartbeat(nil), "the deadline of Acquire's ctx does not touch the lease")
			require.NoError(t, res.l.Complete())
		})
	})
	for _, next := range []bool{true, false} {
		name := map[bool]string{true: "deadline-after-wake/next-waiter", false: "deadline-after-wake/no-waiter"}[next]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{OnEvent: rec.record})
				ctx := newHarnessCtx()
				late := goAcquire(ctx, r, "late")
				synctest.Wait()
				var live <-chan result
				if next {
					live = goAcquire(context.Background(), r, "live")
					synctest.Wait()
				}
				struck := make(chan struct{}, 1)
				ctx.onConsult(func() {
					ctx.cancel(context.DeadlineExceeded)
					struck <- struct{}{}
				})
				require.NoError(t, r.Enqueue("a", "")) // wakes "late", first in line; the deadline strikes as it looks at its ctx
				synctest.Wait()
				receive(t, struck)
				res := receive(t, late)
				require.ErrorIs(t, res.err, context.DeadlineExceeded)
				require.Nil(t, res.l)
				var l *lease
				if next {
					res = receive(t, live) // the wake-up was passed on
					require.NoError(t, res.err)
					l = res.l
				} else {
					j := get(t, r, "a")
					require.Equal(t, leaserouter.StatePending, j.State, "not swallowed")
					require.Zero(t, j.Attempt)
					l = acquire(t, r, "next")
				}
				require.Equal(t, "a", l.JobID)
				require.Equal(t, 1, l.Attempt)
				require.EqualValues(t, 1, r.Stats().LeasesGranted)
				for _, e := range rec.ofKind(leaserouter.EventLeaseAcquired) {
					require.NotEqual(t, "late", e.WorkerID)
				}
			})
		})
	}
}

// TestHarnessCloseWithTenBlockedAcquires: Close wakes ten blocked Acquires
// with ErrClosed and leaves no goroutine behind (the bubble would deadlock,
// and goleak would complain). With leases held, the waiters are woken at
// once while Close drains: a lease may still complete or release, and the
// one still held when Close's ctx ends is revoked (job pending, attempt
// kept, holder refused with reason "revoked").
func TestHarnessCloseWithTenBlockedAcquires(t *testing.T) {
	const waiters = 10
	start := func(r *router) []<-chan result {
		chs := make([]<-chan result, waiters)
		for i := range chs {
			chs[i] = goAcquire(context.Background(), r, fmt.Sprint("w", i))
			synctest.Wait() // in arrival order
		}
		return chs
	}
	requireClosed := func(t *testing.T, r *router, chs []<-chan result) {
		t.Helper()
		for i, ch := range chs {
			res := receive(t, ch)
			require.ErrorIs(t, res.err, leaserouter.ErrClosed, "waiter %d", i)
			require.Nil(t, res.l, "waiter %d", i)
		}
		l, err := r.Acquire(context.Background(), "late")
		require.ErrorIs(t, err, leaserouter.ErrClosed)
		require.Nil(t, l)
		require.ErrorIs(t, r.Enqueue("late", ""), leaserouter.ErrClosed)
	}
	t.Run("idle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := setup(t, leaserouter.Options{})
			chs := start(r)
			for _, ch := range chs {
				requireBlocked(t, ch)
			}
			require.NoError(t, r.Close(context.Background()))
			synctest.Wait()
			requireClosed(t, r, chs)
			require.Equal(t, leaserouter.Stats{}, r.Stats())
			require.NoError(t, r.Audit())
		})
	})
	t.Run("draining", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := setup(t, leaserouter.Options{LeaseDuration: 3 * ld})
			chs := start(r)
			var held []*lease
			for i, id := range []string{"a", "b", "c"} {
				require.NoError(t, r.Enqueue(id, ""))
				synctest.Wait()
				res := receive(t, chs[i])
				require.NoError(t, res.err)
				require.Equal(t, id, res.l.JobID, "waiters are served in arrival order")
				held = append(held, res.l)
			}
			ctx, cancel := context.WithTimeout(context.Background(), ld)
			defer cancel()
			closed := goClose(ctx, r)
			synctest.Wait()
			requireClosed(t, r, chs[len(held):]) // at once, while Close still drains
			requireBlocked(t, closed)

			require.NoError(t, held[0].Complete())
			require.NoError(t, held[1].Release())
			synctest.Wait()
			requireBlocked(t, closed)
			sleep(ld) // Close's ctx ends: the lease still held is revoked
			require.ErrorIs(t, receive(t, closed), context.DeadlineExceeded)

			require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
			for _, id := range []string{"b", "c"} {
				j := get(t, r, id)
				require.Equal(t, leaserouter.StatePending, j.State, id)
				require.Equal(t, 1, j.Attempt, id)
			}
			c := held[2]
			require.Empty(t, harnessLost(c.Complete(), c, c.Token, "revoked"))
			st := r.Stats()
			require.Zero(t, st.Leased)
			require.EqualValues(t, len(held), st.LeasesGranted)
			require.NoError(t, r.Audit())
		})
	})
}

// ---------------------------------------------------------------------------
// Chaos soak (TestChaosSoak)

// chaosDone closes done once every job is terminal: the number of terminal
// events reaches the number of jobs, known once the producers have stopped.
type chaosDone struct {
	mu       sync.Mutex
	terminal int
	target   int // -1 until known
	done     chan struct{}
}

func (c *chaosDone) add() {
	c.mu.Lock()
	c.terminal++
	c.check()
	c.mu.Unlock()
}

func (c *chaosDone) setTarget(n int) {
	c.mu.Lock()
	c.target = n
	c.check()
	c.mu.Unlock()
}

func (c *chaosDone) check() {
	if c.target >= 0 && c.terminal >= c.target && c.done != nil {
		close(c.done)
		c.done = nil
	}
}

// chaosCounts are what the workers and producers did.
type chaosCounts struct {
	leases, crashes, stalls, stale, fails, releases, cancels, completes, full, dups atomic.Int64
}

// TestChaosSoak runs workers that crash (abandon a lease), stall past its
// expiry and then try to complete, fail, release and cancel, while
// producers keep adding jobs (and duplicates) against a capacity, for a
// fixed stretch of wall time. Then production stops, the crash and stall
// rates decay to zero, and the workers finish every job. No job may be
// lost or completed twice; lease_acquired tokens rise per job (and over
// the router); every successful lease operation carried the job's current
// token; every refusal is the lease's *LeaseLostError; Stats, events and
// Audit agree. The run length is set by a context deadline, never
// asserted; a generous guard turns a hang into a failure.
func TestChaosSoak(t *testing.T) {
	const (
		produceFor  = 2500 * time.Millisecond // how long producers add jobs
		decayFor    = 250 * time.Millisecond  // then crash and stall rates fall linearly to zero
		leaseFor    = 30 * time.Millisecond
		maxAttempts = 6
		capacity    = 200
		producers   = 2
		workers     = 8
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	guard, cancelGuard := context.WithTimeout(context.Background(), time.Minute)
	defer cancelGuard()
	produceCtx, stopProducing := context.WithTimeout(guard, produceFor)
	defer stopProducing()
	stopAt, _ := produceCtx.Deadline()
	workCtx, stopWork := context.WithCancel(guard)
	defer stopWork()
	// chaos is 1 while producing, then falls linearly to 0 over decayFor.
	chaos := func() float64 {
		past := time.Since(stopAt)
		return min(1, max(0, 1-float64(past)/float64(decayFor)))
	}

	var (
		log   raceEventLog
		fails raceFailures
		ops   raceOps
		n     chaosCounts
		fin   = chaosDone{target: -1, done: make(chan struct{})}
		done  = fin.done
		space = make(chan struct{}, 1) // a job finished: a producer refused with ErrFull may retry
		idsMu sync.Mutex
		ids   []string // every job enqueued
	)
	r, err := leaserouter.New[string](leaserouter.Options{
		LeaseDuration: leaseFor,
		MaxAttempts:   maxAttempts,
		Capacity:      capacity,
		Backoff:       func(int) time.Duration { return time.Duration(rand.IntN(3)) * time.Millisecond },
		OnEvent: func(e leaserouter.Event) {
			log.add(e)
			switch e.Kind {
			case leaserouter.EventCompleted, leaserouter.EventDead, leaserouter.EventCanceled:
				fin.add()
				select {
				case space <- struct{}{}:
				default:
				}
			}
		},
	})
	require.NoError(t, err)
	defer r.Close(context.Background())

	pickID := func(rng *rand.Rand) string {
		idsMu.Lock()
		defer idsMu.Unlock()
		if len(ids) == 0 {
			return ""
		}
		return ids[rng.IntN(len(ids))]
	}
	// refused checks err is l's refusal and counts it.
	refused := func(what string, l *leaserouter.Lease[string], err error) {
		n.stale.Add(1)
		raceCheckLost(&fails, what, l, err)
		var lle *leaserouter.LeaseLostError
		if errors.As(err, &lle) && lle.Current < lle.Token {
			fails.addf("%s on %s/%d: current token %d is older", what, l.JobID, l.Token, lle.Current)
		}
	}
	try := func(kind leaserouter.EventKind, l *leaserouter.Lease[string], err error) bool {
		if err != nil {
			refused(kind.String(), l, err)
			return false
		}
		ops.add(kind, l)
		return true
	}
	// mustRefuse is for operations that cannot succeed (the lease is past
	// its expiry, or its job was canceled).
	mustRefuse := func(what string, kind leaserouter.EventKind, l *leaserouter.Lease[string], err error) {
		if err == nil {
			fails.addf("%s on %s/%d succeeded", what, l.JobID, l.Token)
			ops.add(kind, l)
			return
		}
		refused(what, l, err)
	}

	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(p)))
			for k := 0; produceCtx.Err() == nil; k++ {
				if rng.IntN(20) == 0 {
					if id := pickID(rng); id != "" {
						n.dups.Add(1)
						if err := r.Enqueue(id, "dup"); !errors.Is(err, leaserouter.ErrDuplicate) {
							fails.addf("Enqueue of known %s: got %v, want ErrDuplicate", id, err)
						}
					}
				}
				id := fmt.Sprintf("p%d-%06d", p, k)
				var opts []leaserouter.EnqueueOption
				if rng.IntN(8) == 0 {
					opts = append(opts, leaserouter.WithDelay(time.Duration(1+rng.IntN(3))*time.Millisecond))
				}
				if rng.IntN(4) == 0 {
					opts = append(opts, leaserouter.WithPriority(rng.IntN(3)))
				}
				for {
					err := r.Enqueue(id, id, opts...)
					if err == nil {
						idsMu.Lock()
						ids = append(ids, id)
						idsMu.Unlock()
						break
					}
					if !errors.Is(err, leaserouter.ErrFull) {
						fails.addf("Enqueue %s: %v", id, err)
						return
					}
					n.full.Add(1)
					select {
					case <-space:
					case <-produceCtx.Done():
						return
					}
				}
			}
		})
	}

	abandoned := make([][]*leaserouter.Lease[string], workers)
	var wwg sync.WaitGroup
	for w := range workers {
		wwg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(100+w)))
			me := fmt.Sprint("w", w)
			var last leaserouter.Token
			for k := 0; ; k++ {
				var l *leaserouter.Lease[string]
				var err error
				if rng.IntN(3) == 0 {
					if l, err = r.TryAcquire(me); errors.Is(err, leaserouter.ErrNoJob) {
						l, err = nil, nil
					}
				}
				if l == nil && err == nil {
					l, err = r.Acquire(workCtx, me)
				}
				if err != nil {
					if workCtx.Err() == nil || !errors.Is(err, workCtx.Err()) {
						fails.addf("worker %s: acquire: %v", me, err)
					}
					return
				}
				n.leases.Add(1)
				// This worker's grants are serial, so its tokens rise too.
				if l.Token <= last || l.Payload != l.JobID || l.WorkerID != me || l.Attempt < 1 || l.Attempt > maxAttempts {
					fails.addf("worker %s: bad lease %+v after token %d", me, *l, last)
				}
				last = l.Token
				if k%128 == 127 {
					if err := r.Audit(); err != nil {
						fails.addf("Audit mid-run: %v", err)
					}
				}

				level := chaos()
				switch x := rng.Float64(); {
				case x < 0.10*level: // crash: the lease is never touched again (until the end)
					n.crashes.Add(1)
					abandoned[w] = append(abandoned[w], l)
					continue
				case x < 0.16*level: // stall past the expiry, then try to finish
					n.stalls.Add(1)
					select {
					case <-time.After(time.Until(l.Expiry()) + time.Millisecond):
					case <-guard.Done():
						return
					}
					mustRefuse("Complete after the expiry", leaserouter.EventCompleted, l, l.Complete())
					continue
				}
				for i := range rng.IntN(3) {
					try(leaserouter.EventLeaseExtended, l, l.Heartbeat([]byte{byte(i)}))
				}
				switch x := rng.IntN(100); {
				case x < 10:
					n.fails.Add(1)
					try(leaserouter.EventFailed, l, l.Fail(errors.New("chaos: retry")))
				case x < 13:
					n.fails.Add(1)
					if try(leaserouter.EventFailed, l, l.Fail(leaserouter.Permanent(errors.New("chaos: fatal")))) {
						if j, ok := r.Get(l.JobID); !ok || j.State != leaserouter.StateFailed || j.Token != l.Token {
							fails.addf("after a permanent Fail of %s/%d: %+v", l.JobID, l.Token, j)
						}
					}
				case x < 21:
					n.releases.Add(1)
					try(leaserouter.EventReleased, l, l.Release())
				case x < 24: // cancel the job held: the lease is lost at once
					n.cancels.Add(1)
					if err := r.Cancel(l.JobID); err != nil {
						fails.addf("Cancel %s: %v", l.JobID, err)
					}
					mustRefuse("Complete after Cancel", leaserouter.EventCompleted, l, l.Complete())
				default:
					if x < 27 { // cancel some job, maybe this one
						n.cancels.Add(1)
						if id := pickID(rng); id != "" {
							if err := r.Cancel(id); err != nil {
								fails.addf("Cancel %s: %v", id, err)
							}
						}
					}
					n.completes.Add(1)
					if try(leaserouter.EventCompleted, l, l.Complete()) {
						if j, ok := r.Get(l.JobID); !ok || j.State != leaserouter.StateSucceeded || j.Token != l.Token {
							fails.addf("after Complete of %s/%d: %+v", l.JobID, l.Token, j)
						}
					}
				}
			}
		})
	}

	pwg.Wait()
	idsMu.Lock()
	total := len(ids)
	idsMu.Unlock()
	fin.setTarget(total)
	select {
	case <-done:
	case <-guard.Done():
	}
	stopWork()
	wwg.Wait()
	fails.require(t)
	require.NoError(t, guard.Err(), "jobs unfinished when the guard ran out: %+v", r.Stats())

	// Every job is terminal, so every abandoned lease is dead.
	for _, ls := range abandoned {
		for _, l := range ls {
			mustRefuse("Complete of an abandoned lease", leaserouter.EventCompleted, l, l.Complete())
		}
	}
	fails.require(t)
	st := r.Stats()
	require.Zero(t, st.Pending+st.Scheduled+st.Leased, "%+v", st)
	require.NoError(t, r.Audit())
	closeCtx, cancelClose := context.WithTimeout(guard, 10*time.Second)
	defer cancelClose()
	require.NoError(t, r.Close(closeCtx))
	require.NoError(t, r.Audit())
	require.Equal(t, st, r.Stats())

	// The token story of every job, one terminal event each.
	evs := log.all()
	count := raceCheckStream(t, evs)

	// Every successful lease operation produced its event, with the token
	// it was made with, which raceCheckStream showed was the job's current
	// token at that point; and every such event came from one of them.
	fromEvents := make(map[raceOp]int)
	for _, e := range evs {
		switch e.Kind {
		case leaserouter.EventCompleted, leaserouter.EventFailed, leaserouter.EventReleased, leaserouter.EventLeaseExtended:
			fromEvents[raceOp{e.Kind, e.JobID, e.Token}]++
		}
	}
	require.Equal(t, ops.n, fromEvents, "successful lease operations vs their events")

	// No job lost, none completed twice; each in the state of its one
	// terminal event.
	terminal := make(map[string]leaserouter.EventKind)
	completed := make(map[string]int)
	for _, e := range evs {
		switch e.Kind {
		case leaserouter.EventCompleted, leaserouter.EventDead, leaserouter.EventCanceled:
			if prev, ok := terminal[e.JobID]; ok {
				require.Failf(t, "second terminal event", "%+v after %v", e, prev)
			}
			terminal[e.JobID] = e.Kind
			if e.Kind == leaserouter.EventCompleted {
				completed[e.JobID]++
			}
		}
	}
	wantState := map[leaserouter.EventKind]leaserouter.State{
		leaserouter.EventCompleted: leaserouter.StateSucceeded,
		leaserouter.EventDead:      leaserouter.StateFailed,
		leaserouter.EventCanceled:  leaserouter.StateCanceled,
	}
	for _, id := range ids {
		j, ok := r.Get(id)
		require.True(t, ok, "job %s lost", id)
		require.True(t, j.State.Terminal(), "job %s is %v", id, j.State)
		kind, ok := terminal[id]
		require.True(t, ok, "job %s has no terminal event", id)
		require.Equal(t, wantState[kind], j.State, "job %s", id)
		require.LessOrEqual(t, completed[id], 1, "job %s completed twice", id)
		require.Equal(t, id, j.Payload, "a duplicate Enqueue changed job %s", id)
	}
	require.Len(t, terminal, total)
	for op, k := range ops.n {
		if op.kind == leaserouter.EventCompleted {
			require.Equal(t, 1, k, "job %s completed twice with token %d", op.job, op.token)
		}
	}

	// Totals agree with the events and with what the workers saw.
	require.EqualValues(t, total, st.Enqueued)
	require.EqualValues(t, count[leaserouter.EventEnqueued], st.Enqueued)
	require.EqualValues(t, n.dups.Load(), st.Duplicates)
	require.EqualValues(t, count[leaserouter.EventDuplicate], st.Duplicates)
	require.EqualValues(t, n.leases.Load(), st.LeasesGranted)
	require.EqualValues(t, count[leaserouter.EventLeaseAcquired], st.LeasesGranted)
	require.EqualValues(t, count[leaserouter.EventLeaseExtended], st.Heartbeats)
	require.EqualValues(t, count[leaserouter.EventLeaseExpired], st.Expirations)
	require.EqualValues(t, count[leaserouter.EventRetryScheduled], st.Retries)
	require.EqualValues(t, count[leaserouter.EventDead], st.Dead)
	require.EqualValues(t, n.stale.Load(), st.StaleRejections, "every refusal the workers saw, and no other")
	require.EqualValues(t, count[leaserouter.EventStaleRejected], st.StaleRejections)
	require.Zero(t, st.Purged)
	require.Equal(t, count[leaserouter.EventCompleted], st.Succeeded)
	require.Equal(t, count[leaserouter.EventDead], st.Failed)
	require.Equal(t, count[leaserouter.EventCanceled], st.Canceled)
	require.Equal(t, total, st.Succeeded+st.Failed+st.Canceled)

	// The run exercised what it is about.
	for _, k := range []leaserouter.EventKind{leaserouter.EventCompleted, leaserouter.EventLeaseExpired,
		leaserouter.EventStaleRejected, leaserouter.EventRetryScheduled, leaserouter.EventDead, leaserouter.EventCanceled,
		leaserouter.EventReleased} {
		require.NotZero(t, count[k], "no %v event", k)
	}
	require.NotZero(t, n.stalls.Load())
	require.NotZero(t, n.crashes.Load())

	t.Logf("chaos: %d jobs, %d leases, %d expirations, %d stale rejections; %d crashes, %d stalls, %d fails, %d releases, %d cancels, %d ErrFull, %d duplicates; %d events",
		total, st.LeasesGranted, st.Expirations, st.StaleRejections, n.crashes.Load(), n.stalls.Load(),
		n.fails.Load(), n.releases.Load(), n.cancels.Load(), n.full.Load(), n.dups.Load(), len(evs))
}
