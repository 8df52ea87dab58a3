package leaserouter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

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
						if j, ok := r.Get(l.JobID); !ok || j.State != leaserouter.StateDead || j.Token != l.Token {
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

	evs := log.all()
	count := raceReconcile(t, r, evs, &ops, ids, st)
	for _, id := range ids {
		j, _ := r.Get(id)
		require.Equal(t, id, j.Payload, "a duplicate Enqueue changed job %s", id)
	}
	// And with what the workers saw.
	require.EqualValues(t, n.dups.Load(), st.Duplicates)
	require.EqualValues(t, n.leases.Load(), st.LeasesGranted)
	require.EqualValues(t, n.stale.Load(), st.StaleRejections, "every refusal the workers saw, and no other")
	require.Zero(t, st.Purged)

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
