package routertest

// The linearizability workload and its recorder: History records each
// call as a porcupine Operation (linz.go has the model that checks it),
// Workload drives the goroutines that make the calls.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// History is a recorded concurrent history.
type History struct {
	clock  atomic.Int64
	budget atomic.Int64 // operations still to record
	mu     sync.Mutex
	ops    []porcupine.Operation
	noJob  atomic.Int64 // TryAcquire calls that returned ErrNoJob (not recorded)
	// lease, runLease: set A's and set R's LeaseDuration. A lease granted
	// or heartbeated by a call made at c lasts at least until c plus its
	// duration (the contract's bound, whatever the backend's Expiry says).
	lease, runLease time.Duration
	// totals: Caps.Totals, the backend's totals summed over its distinct
	// handles, read after the last operation.
	totals *leaserouter.Stats
	// closing: the clock when the first Close was called.
	closing int64
}

// validUntil is the contract's lower bound on the expiry of a lease of
// job id granted or heartbeated by a call made at call.
func (h *History) validUntil(id string, call time.Time) int64 {
	d := h.lease
	if strings.HasPrefix(id, "run-") {
		d = h.runLease
	}
	return call.Add(d).UnixNano()
}

// Ops returns the recorded operations.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

func (h *History) now() int64 { return h.clock.Add(1) }

func (h *History) add(client int, in linInput, out linOutput, call, ret int64) {
	in.at = time.Now().UnixNano()
	h.budget.Add(-1)
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (h *History) enqueue(ctx context.Context, b Backend, client int, ids ...string) {
	call := h.now()
	var err error
	var dups []int
	if len(ids) == 1 {
		err = b.Enqueue(ctx, ids[0], ids[0])
		if errors.Is(err, leaserouter.ErrDuplicate) {
			err, dups = nil, []int{0}
		}
	} else {
		specs := make([]leaserouter.JobSpec[string], len(ids))
		for i, id := range ids {
			specs[i] = leaserouter.JobSpec[string]{ID: id, Payload: id}
		}
		dups, err = b.EnqueueMany(ctx, specs)
	}
	ret := h.now()
	for i, id := range ids {
		out := linOutput{ok: err == nil, err: errText(err)}
		for _, d := range dups {
			if d == i {
				out.ok = false
			}
		}
		h.add(client, linInput{kind: linEnqueue, job: id}, out, call, ret)
	}
}

// granted records the leases of one acquire call, all with the call's
// interval (a batch is atomic: any order of them is a linearization), or
// its refusal, and returns the leases.
func (h *History) granted(client, handle int, ls []Lease, err error, call, ret int64, callAt time.Time) []Lease {
	switch {
	case errors.Is(err, leaserouter.ErrNoJob):
		h.noJob.Add(1)
		return nil
	case err != nil:
		h.add(client, linInput{kind: linAcquire}, linOutput{err: err.Error()}, call, ret)
		return nil
	}
	for _, l := range ls {
		h.add(client, linInput{kind: linAcquire, job: l.JobID(), token: l.Token(), handle: handle}, linOutput{ok: true, attempt: l.Attempt(), expiry: h.validUntil(l.JobID(), callAt)}, call, ret)
	}
	return ls
}

func (h *History) acquire(ctx context.Context, b Backend, handle, client int, worker string, max int) []Lease {
	callAt, call := time.Now(), h.now()
	var ls []Lease
	var err error
	if max == 1 {
		var l Lease
		if l, err = b.TryAcquire(ctx, worker); err == nil {
			ls = []Lease{l}
		}
	} else {
		ls, err = b.TryAcquireMany(ctx, worker, max)
	}
	ret := h.now()
	return h.granted(client, handle, ls, err, call, ret, callAt)
}

func (h *History) leaseOp(ctx context.Context, client int, kind linKind, l Lease, perm bool) error {
	callAt, call := time.Now(), h.now()
	var err error
	switch kind {
	case linHeartbeat:
		err = l.Heartbeat(ctx, nil)
	case linComplete:
		err = l.Complete(ctx)
	case linFail:
		cause := errors.New("lin: attempt failed")
		if perm {
			cause = leaserouter.Permanent(cause)
		}
		err = l.Fail(ctx, cause)
	case linRelease:
		err = l.Release(ctx)
	}
	ret := h.now()
	out := linOutput{ok: err == nil}
	var lost *leaserouter.LeaseLostError
	switch {
	case err == nil:
		if kind == linHeartbeat {
			out.expiry = h.validUntil(l.JobID(), callAt)
		}
	case errors.As(err, &lost):
		out.token, out.refused, out.reason = lost.Current, lost.Token, string(lost.Reason)
	default:
		out.err = err.Error()
	}
	h.add(client, linInput{kind: kind, job: l.JobID(), token: l.Token(), perm: perm}, out, call, ret)
	return err
}

// expire records a forced expiry of job id.
func (h *History) expire(ctx context.Context, e Expirer, client int, id string) {
	call := h.now()
	ok := e.ExpireNow(ctx, id)
	ret := h.now()
	h.add(client, linInput{kind: linExpire, job: id}, linOutput{ok: ok}, call, ret)
}

func (h *History) get(ctx context.Context, b Backend, client int, id string) {
	call := h.now()
	j, ok, err := b.Get(ctx, id)
	ret := h.now()
	out := linOutput{ok: ok, state: j.State, token: j.Token, attempt: j.Attempt, err: errText(err)}
	h.add(client, linInput{kind: linGet, job: id}, out, call, ret)
}

// linPool holds recent leases, shared by zombies and the observer.
type linPool struct {
	mu     sync.Mutex
	leases [16]Lease
	all    []Lease
	n      int
}

func (p *linPool) add(l Lease) {
	p.mu.Lock()
	p.leases[p.n%len(p.leases)] = l
	p.all = append(p.all, l)
	p.n++
	p.mu.Unlock()
}

func (p *linPool) pick(rng *rand.Rand) Lease {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return nil
	}
	return p.leases[rng.IntN(min(p.n, len(p.leases)))]
}

// Workload runs the workload against h (the caller is in h.Scope) and
// returns its history, unchecked.
func Workload(t T, h Harness, cfg LinConfig, seed uint64) *History {
	ops := cmp(cfg.Ops, 3000)
	lease := cfg.Lease
	if lease == 0 {
		lease = h.Lease() / 4
	}
	runLease := cfg.RunLease
	if runLease == 0 {
		runLease = h.Lease()
	}
	handles := cmp(cfg.Handles, 2)
	ctx := t.Context()
	zero := func(int) time.Duration { return 0 }
	as := h.Open(t, Config{LeaseDuration: lease, MaxAttempts: linMaxAttempts, Backoff: zero}, handles)
	rs := h.Open(t, Config{LeaseDuration: runLease, MaxAttempts: linMaxAttempts, Backoff: zero}, 1)[0]

	// handleOf numbers the distinct handles of set A (an in-process
	// backend's n handles are one); set R's is runHandle.
	const runHandle = -1
	handleOf := func(b Backend) int {
		for i, x := range as {
			if x == b {
				return i
			}
		}
		return runHandle
	}
	hist := &History{lease: lease, runLease: runLease}
	hist.budget.Store(int64(ops))
	var (
		nextJob, nextRunJob atomic.Int64
		pending             atomic.Int64 // set A: enqueued minus acquired, roughly: keeps few jobs live
		pool                linPool
		start               = make(chan struct{})
		wg                  sync.WaitGroup
		client              int
	)
	take := func(rng *rand.Rand) bool {
		runtime.Gosched()
		if rng.IntN(8) == 0 {
			h.Advance(time.Duration(rng.Int64N(int64(lease / 4))))
		}
		return hist.budget.Load() > 0
	}
	goroutine := func(body func(c int, b Backend, rng *rand.Rand)) {
		client++
		c := client
		b := as[c%len(as)]
		wg.Go(func() {
			<-start
			body(c, b, rand.New(rand.NewPCG(seed, uint64(c))))
		})
	}
	// Enqueuers of set A: a new job (sometimes two in one batch) while few
	// are pending, else a recent ID again.
	for range 2 {
		goroutine(func(c int, b Backend, rng *rand.Rand) {
			for take(rng) {
				n := nextJob.Load()
				if pending.Load() < 4 || n == 0 {
					if rng.IntN(4) == 0 {
						n = nextJob.Add(2)
						pending.Add(2)
						hist.enqueue(ctx, b, c, fmt.Sprint("job-", n-1), fmt.Sprint("job-", n))
						continue
					}
					n = nextJob.Add(1)
					pending.Add(1)
				} else {
					n -= int64(rng.IntN(int(min(n, 8))))
				}
				hist.enqueue(ctx, b, c, fmt.Sprint("job-", n))
			}
		})
	}
	// Workers: acquire, heartbeat a few times, then complete, fail or
	// release; a refused operation makes them drop the lease.
	for range 2 {
		goroutine(func(c int, b Backend, rng *rand.Rand) {
			var cur Lease
			for take(rng) {
				if cur == nil {
					if ls := hist.acquire(ctx, b, handleOf(b), c, fmt.Sprint("worker-", c), 1); ls != nil {
						cur = ls[0]
						pending.Add(-1)
						pool.add(cur)
					}
					continue
				}
				kind, perm := linHeartbeat, false
				switch p := rng.IntN(20); {
				case p < 5:
					kind = linComplete
				case p < 7:
					kind, perm = linFail, p == 6 && rng.IntN(4) == 0
				case p < 8:
					kind = linRelease
				}
				if err := hist.leaseOp(ctx, c, kind, cur, perm); err != nil || kind != linHeartbeat {
					cur = nil
				}
			}
		})
	}
	// Keepers: a lease under KeepAlive, used after a wait of up to twice
	// the lease; a canceled KeepAlive ctx is recorded. The first lease
	// a keeper gets is lost for sure: released under its KeepAlive, whose
	// ctx ends with the release (so every run records a loss).
	goroutine(func(c int, b Backend, rng *rand.Rand) {
		forced := false
		for take(rng) {
			ls := hist.acquire(ctx, b, handleOf(b), c, fmt.Sprint("keeper-", c), 1)
			if ls == nil {
				continue
			}
			l := ls[0]
			pending.Add(-1)
			pool.add(l)
			call := hist.now()
			kctx, cancel := b.KeepAlive(ctx, l, 0)
			if !forced {
				forced = true
				_ = hist.leaseOp(ctx, c, linRelease, l, false)
				eventually(t, h, "KeepAlive's ctx canceled once its lease was released", func() bool { return kctx.Err() != nil })
			} else {
				h.Advance(time.Duration(rng.Int64N(int64(2 * lease))))
			}
			if kctx.Err() != nil {
				ret := hist.now()
				out := linOutput{}
				if cause := context.Cause(kctx); !errors.Is(cause, leaserouter.ErrLeaseLost) {
					out.err = fmt.Sprintf("KeepAlive canceled with %v", cause)
				}
				hist.add(c, linInput{kind: linKeepLost, job: l.JobID(), token: l.Token()}, out, call, ret)
			}
			_ = hist.leaseOp(ctx, c, linComplete, l, false) // refused if lost
			cancel()
		}
	})
	// Zombies: take leases in batches, never heartbeat them, and replay
	// their own or the pool's leases whatever became of them.
	for range 2 {
		goroutine(func(c int, b Backend, rng *rand.Rand) {
			var kept []Lease
			for take(rng) {
				if rng.IntN(4) == 0 {
					for _, l := range hist.acquire(ctx, b, handleOf(b), c, fmt.Sprint("zombie-", c), 1+rng.IntN(3)) {
						kept = append(kept, l)
						pending.Add(-1)
						pool.add(l)
					}
					continue
				}
				l := pool.pick(rng)
				if len(kept) > 0 && rng.IntN(2) == 0 {
					l = kept[rng.IntN(len(kept))]
				}
				if l != nil {
					_ = hist.leaseOp(ctx, c, linKind(int(linHeartbeat)+rng.IntN(4)), l, false) // refusals are the point
				}
			}
		})
	}
	// Run's zombie: replays the leases Run's handlers hold, so that a job
	// is pending again (or finished) while its handler still runs, Run
	// leases it again, and Run then ends a lease no longer valid.
	var runPool linPool
	for range 2 {
		goroutine(func(c int, _ Backend, rng *rand.Rand) {
			for take(rng) {
				if l := runPool.pick(rng); l != nil {
					kind := [...]linKind{linRelease, linRelease, linFail, linFail, linHeartbeat, linComplete}[rng.IntN(6)]
					_ = hist.leaseOp(ctx, c, kind, l, false)
				}
			}
		})
	}
	// setOf returns the handle to read job id with.
	setOf := func(id string, b Backend) Backend {
		if strings.HasPrefix(id, "run-") {
			return rs
		}
		return b
	}
	// Observer: Get of a recently leased job.
	goroutine(func(c int, b Backend, rng *rand.Rand) {
		for take(rng) {
			if l := pool.pick(rng); l != nil {
				hist.get(ctx, setOf(l.JobID(), b), c, l.JobID())
			}
		}
	})
	// Expirer (Caps.ForcedExpiry): forces the expiry of a recently
	// leased job, at any instant rather than when the clock passes it.
	if ok, why := needs(h.Caps(), "ForcedExpiry"); ok {
		exps := map[Backend]Expirer{}
		for _, b := range slices.Concat(as, []Backend{rs}) {
			exps[b] = expirer(t, b) // here, before the goroutines: FailNow ends this one
		}
		goroutine(func(c int, b Backend, rng *rand.Rand) {
			for take(rng) {
				if l := pool.pick(rng); l != nil {
					hist.expire(ctx, exps[setOf(l.JobID(), b)], c, l.JobID())
				}
			}
		})
	} else {
		t.Logf("forced expiry: not applicable on %s (needs ForcedExpiry): %s", h.Name(), why)
	}
	// Set R: an enqueuer and Run.
	client++
	runEnq := client
	wg.Go(func() {
		<-start
		rng := rand.New(rand.NewPCG(seed, uint64(runEnq)))
		for take(rng) {
			if st, err := rs.Stats(ctx); err == nil && st.Pending >= 6 {
				h.Advance(lease / 8)
				continue
			}
			hist.enqueue(ctx, rs, runEnq, fmt.Sprint("run-", nextRunJob.Add(1)))
		}
	})
	client++
	runClient := client
	type ended struct {
		in   linInput
		call int64
	}
	var runMu sync.Mutex
	var runEnded []ended
	runCtx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	runStartAt, runStart := time.Now(), hist.now()
	var handlerSeq atomic.Uint64
	go func() {
		<-start
		runErr <- rs.Run(runCtx, leaserouter.WorkerOptions{Workers: 3, WorkerID: "run", Batch: 1}, func(hctx context.Context, l Lease) error {
			entry := hist.now()
			hist.add(runClient, linInput{kind: linAcquire, job: l.JobID(), token: l.Token(), handle: runHandle}, linOutput{ok: true, attempt: l.Attempt(), expiry: hist.validUntil(l.JobID(), runStartAt)}, runStart, entry)
			pool.add(l)
			runPool.add(l)
			rng := rand.New(rand.NewPCG(seed, handlerSeq.Add(1)<<32))
			for range 1 + rng.IntN(3) {
				h.Advance(time.Duration(rng.Int64N(int64(runLease / 20))))
				_ = hist.leaseOp(ctx, runClient, linHeartbeat, l, false) // the test's ctx: a lost lease is refused, not canceled
			}
			var err error
			kind, perm := linRunComplete, false
			switch p := rng.IntN(10); {
			case p < 2:
				kind, err = linRunFail, errors.New("lin: handler failed")
			case p < 3:
				kind, perm, err = linRunFail, true, leaserouter.Permanent(errors.New("lin: handler failed for good"))
			}
			runMu.Lock()
			runEnded = append(runEnded, ended{linInput{kind: kind, job: l.JobID(), token: l.Token(), perm: perm}, hist.now()})
			runMu.Unlock()
			return err
		})
	}()

	close(start)
	wg.Wait()
	// Set R drained, Run stopped: with nothing ready, no lease Run takes
	// goes unrecorded.
	eventually(t, h, "Run finishes set R", func() bool {
		st, err := rs.Stats(ctx)
		require.NoError(t, err)
		return st.Pending+st.Scheduled+st.Leased == 0
	})
	stopRun()
	require.NoError(t, <-runErr)

	// Close everything with leases still held: Close's revocation, one
	// operation per job over Close's interval. With several handles, the
	// first also holds stale leases of jobs another handle leased since:
	// its Close must revoke its own leases only, which the other
	// handle's heartbeats between the Closes check.
	hist.enqueue(ctx, as[0], 0, "held-1", "held-2", "held-3")
	for _, l := range hist.acquire(ctx, as[0], 0, 0, "holder", 3) {
		pool.add(l)
	}
	last := as[len(as)-1]
	var others []Lease // leases of last, if it is not as[0]
	if handleOf(last) != 0 {
		h.Advance(lease + lease/4)
		others = hist.acquire(ctx, last, handleOf(last), 0, "other-holder", 64)
		for _, l := range others {
			pool.add(l)
		}
		hist.enqueue(ctx, as[0], 0, "held-4", "held-5", "held-6")
		for _, l := range hist.acquire(ctx, as[0], 0, 0, "holder", 3) {
			pool.add(l)
		}
	}
	pool.mu.Lock()
	all := append([]Lease(nil), pool.all...)
	pool.mu.Unlock()
	seen := map[string]bool{}
	for _, l := range all {
		seen[l.JobID()] = true
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var closed []Backend
	hist.closing = hist.now()
	for _, b := range slices.Concat(as, []Backend{rs}) {
		if slices.Contains(closed, b) {
			continue // one handle n times
		}
		closed = append(closed, b)
		call := hist.now()
		err := b.Close(done)
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
		ret := hist.now()
		finished := revokeFinished(done, err)
		for id := range seen {
			hist.add(0, linInput{kind: linRevoke, job: id, handle: handleOf(b)}, linOutput{ok: finished}, call, ret)
		}
		if b != last {
			for _, l := range others {
				_ = hist.leaseOp(ctx, 0, linHeartbeat, l, false) // valid still, unless expired
			}
		}
	}
	closeRet := hist.now()
	runMu.Lock()
	for _, e := range runEnded {
		hist.add(runClient, e.in, linOutput{ok: true}, e.call, closeRet)
	}
	runMu.Unlock()
	// Every lease once more, after Close: refused, with the reason.
	for _, l := range all {
		_ = hist.leaseOp(ctx, 0, linHeartbeat, l, false)
	}
	for id := range seen {
		hist.get(ctx, setOf(id, as[0]), 0, id)
	}
	if ok, _ := needs(h.Caps(), "Totals"); ok {
		var sum leaserouter.Stats
		for _, b := range closed {
			st := stats(t, b)
			sum.Enqueued += st.Enqueued
			sum.Duplicates += st.Duplicates
			sum.LeasesGranted += st.LeasesGranted
			sum.Heartbeats += st.Heartbeats
			sum.StaleRejections += st.StaleRejections
			sum.Expirations += st.Expirations
		}
		hist.totals = &sum
	}
	if ok, why := needs(h.Caps(), "Audit"); ok {
		for _, b := range closed {
			a, isAuditor := b.(Auditor)
			require.True(t, isAuditor, "%s declares Audit: its Backend %T implements Auditor", h.Name(), b)
			require.NoError(t, a.Audit(ctx), "the backend's own invariants after the workload")
		}
	} else {
		t.Logf("audit: not applicable on %s (needs Audit): %s", h.Name(), why)
	}
	return hist
}

// revokeFinished reports whether Close(ctx), which returned err, says it
// revoked every lease it still held: it returned nil or ctx.Err() itself.
// A backend whose revocation ran out of time (a done ctx gives it a short
// grace: pgrouter's round trip can outlast it on a busy machine) returns
// an error wrapping ctx.Err() and the revocation's failure: its leases
// were revoked, or end at their expiry.
func revokeFinished(ctx context.Context, err error) bool {
	return err == nil || err == ctx.Err() // ctx.Err() itself, not an error wrapping it
}

// expirer returns b as an Expirer, failing t if the harness declared
// ForcedExpiry of a Backend that does not implement it.
func expirer(t T, b Backend) Expirer {
	t.Helper()
	return offers[Expirer](t, b, "forced expiry (Expirer), which the harness declares (ForcedExpiry)")
}
