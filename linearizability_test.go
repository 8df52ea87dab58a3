package leaserouter_test

// Linearizability of the lease contract, checked with porcupine (Athalye,
// https://github.com/anishathalye/porcupine; the checker is the Wing & Gong /
// Lowe search of Horn and Kroening, "Faster linearizability checking via
// P-compositionality", 2015).
//
// Goroutines hammer one Router in real time with Enqueue, TryAcquire,
// Heartbeat, Complete, Fail, forced expiry (ExpireNow) and Get. Workers use
// their leases honestly; zombies keep every lease they ever saw and replay
// it long after it was superseded. Each call is recorded as a porcupine
// Operation whose Call and Return come from one shared atomic counter read
// just before the call and just after it returns, so the recorded intervals
// respect real time (happens-before) across goroutines.
//
// The history is partitioned by job ID (jobs share nothing in the contract
// but the token counter) and each partition is checked against linModel, a
// sequential model of one job: absent, pending, leased (token, attempt),
// succeeded, failed (dead), plus why its latest lease ended.
//
// Choices the model makes, and why:
//   - TryAcquire picks a job, so it has no job in its input. The recorder
//     puts the job and token it returned into the Operation's Input, which
//     places the acquire in that job's partition. The model accepts "acquire
//     returned job X with token t and attempt a" iff X was pending, t is
//     greater than every token X has had (tokens are global and strictly
//     increasing, so per job strictly greater than the last) and a is one
//     more than X's attempts so far.
//   - TryAcquire returning ErrNoJob is left out of the history: "no job was
//     ready" is a statement about every partition at one instant, which a
//     per-job model cannot judge. Such calls are only counted. Acquire order
//     (priority, ready time) is not checked here either; job_test.go
//     checks it rule by rule.
//   - A refused lease operation must carry a *LeaseLostError whose Token is
//     the refused lease's, whose Current is the job's latest token at the
//     linearization point and whose Reason is "superseded" if the lease is
//     not the job's latest, otherwise how the latest lease ended.
//   - LeaseDuration is 1h and Backoff returns 0, so the only expiries are
//     the forced ones and Fail makes a job pending at once; Retention is the
//     default (10m), so no job is purged while the test runs.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

const (
	linMaxAttempts = 4
	linOps         = 8000 // operations per run, shared by every goroutine
	linMinCount    = 50   // each outcome the clean run must have exercised at least this often
	linPoolSize    = 16   // recent leases shared with zombies, expirers and the observer
	linMaxPending  = 4    // enqueuers add new jobs only while fewer are pending: few live IDs, many collisions
)

type linKind uint8

const (
	linEnqueue linKind = iota + 1
	linAcquire
	linHeartbeat
	linComplete
	linFail
	linExpire
	linGet
)

var linKindNames = [...]string{"?", "Enqueue", "Acquire", "Heartbeat", "Complete", "Fail", "ExpireNow", "Get"}

func (k linKind) String() string { return linKindNames[k] }

// linInput is an operation's input. For lease operations token is the
// lease's; for an acquire, job and token are what it returned (see above).
type linInput struct {
	kind  linKind
	job   string
	token leaserouter.Token
}

// linOutput is an operation's result.
type linOutput struct {
	ok bool // accepted: Enqueue nil, a lease granted, a lease operation nil, ExpireNow true, Get found
	// Acquire: the lease's attempt. Get: the job's Attempt.
	attempt int
	// Refused lease operation: LeaseLostError.Current. Get: the job's Token.
	token leaserouter.Token
	// Refused lease operation: LeaseLostError.Token and Reason.
	refused leaserouter.Token
	reason  string
	state   leaserouter.State // Get: the job's State
	err     string            // an error the contract does not allow here; the model refuses it
}

// linState is the model's state of one job. It is comparable, so
// porcupine's default == equality works.
type linState struct {
	known   bool // enqueued (jobs are never purged during the test)
	state   leaserouter.State
	token   leaserouter.Token // latest lease's token; 0 if never leased
	attempt int               // leases granted so far
	ended   string            // why the latest lease ended, as LeaseLostError.Reason says it
}

// linStep is the sequential contract for one job.
func linStep(s linState, in linInput, out linOutput) (bool, linState) {
	if out.err != "" {
		return false, s
	}
	switch in.kind {
	case linEnqueue:
		if s.known {
			return !out.ok, s // ErrDuplicate, nothing changes
		}
		return out.ok, linState{known: true, state: leaserouter.StatePending}
	case linAcquire:
		ok := out.ok && s.known && s.state == leaserouter.StatePending &&
			in.token > s.token && out.attempt == s.attempt+1 && out.attempt <= linMaxAttempts
		return ok, linState{known: true, state: leaserouter.StateLeased, token: in.token, attempt: out.attempt}
	case linHeartbeat, linComplete, linFail:
		if in.token > s.token {
			return false, s // the lease cannot be used before it was granted
		}
		if s.state != leaserouter.StateLeased || in.token != s.token {
			reason := s.ended
			if in.token != s.token {
				reason = "superseded"
			}
			return !out.ok && out.refused == in.token && out.token == s.token && out.reason == reason, s
		}
		if !out.ok {
			return false, s
		}
		switch in.kind {
		case linComplete:
			s.state, s.ended = leaserouter.StateSucceeded, "completed"
		case linFail:
			s.state, s.ended = linAfterLease(s.attempt), "failed"
		}
		return true, s
	case linExpire:
		if s.state != leaserouter.StateLeased || !s.known {
			return !out.ok, s
		}
		s.state, s.ended = linAfterLease(s.attempt), "expired"
		return out.ok, s
	case linGet:
		if !s.known {
			return !out.ok, s
		}
		return out.ok && out.state == s.state && out.token == s.token && out.attempt == s.attempt, s
	}
	return false, s
}

// linAfterLease is where a job goes when a lease ends by Fail (with a zero
// backoff) or expiry: pending, or dead once its attempts are used up.
func linAfterLease(attempt int) leaserouter.State {
	if attempt >= linMaxAttempts {
		return leaserouter.StateFailed
	}
	return leaserouter.StatePending
}

var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byJob := map[string]int{}
		var parts [][]porcupine.Operation
		for _, op := range history {
			id := op.Input.(linInput).job
			i, ok := byJob[id]
			if !ok {
				i = len(parts)
				byJob[id] = i
				parts = append(parts, nil)
			}
			parts[i] = append(parts[i], op)
		}
		return parts
	},
	Init: func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		return linStep(state.(linState), input.(linInput), output.(linOutput))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		return fmt.Sprintf("%v(%s, %d) -> %+v", in.kind, in.job, in.token, out)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(linState)) },
}

// linHistory records operations with timestamps from one atomic counter.
type linHistory struct {
	clock  atomic.Int64
	budget atomic.Int64 // operations still to record
	mu     sync.Mutex
	ops    []porcupine.Operation
	noJob  atomic.Int64 // TryAcquire calls that returned ErrNoJob (not recorded)
}

func (h *linHistory) add(client int, in linInput, out linOutput, call, ret int64) {
	h.budget.Add(-1)
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

func (h *linHistory) enqueue(r *router, client int, id string) {
	call := h.clock.Add(1)
	err := r.Enqueue(id, id)
	ret := h.clock.Add(1)
	out := linOutput{ok: err == nil}
	if err != nil && !errors.Is(err, leaserouter.ErrDuplicate) {
		out.err = err.Error()
	}
	h.add(client, linInput{kind: linEnqueue, job: id}, out, call, ret)
}

// acquire records a TryAcquire that returned a lease and returns it; it
// returns nil for ErrNoJob. Any other error is recorded under job "" so
// that the model refuses it.
func (h *linHistory) acquire(r *router, client int, worker string) *lease {
	call := h.clock.Add(1)
	l, err := r.TryAcquire(worker)
	ret := h.clock.Add(1)
	if ls := h.granted(client, []*lease{l}, err, call, ret); ls != nil {
		return ls[0]
	}
	return nil
}

// granted records the leases of one acquire call (one for TryAcquire, a
// batch for TryAcquireMany), all with the call's interval, or its refusal,
// and returns the leases (nil if refused).
func (h *linHistory) granted(client int, ls []*lease, err error, call, ret int64) []*lease {
	switch {
	case errors.Is(err, leaserouter.ErrNoJob):
		h.noJob.Add(1)
		return nil
	case err != nil:
		h.add(client, linInput{kind: linAcquire}, linOutput{err: err.Error()}, call, ret)
		return nil
	}
	for _, l := range ls {
		h.add(client, linInput{kind: linAcquire, job: l.JobID, token: l.Token}, linOutput{ok: true, attempt: l.Attempt}, call, ret)
	}
	return ls
}

// acquireMany records TryAcquireMany(worker, max) as one acquire per lease
// granted, all with the call's interval: a batch is atomic, so any order of
// them within it is a linearization, and the checker may find one.
func (h *linHistory) acquireMany(r *router, client int, worker string, max int) []*lease {
	call := h.clock.Add(1)
	ls, err := r.TryAcquireMany(worker, max)
	ret := h.clock.Add(1)
	return h.granted(client, ls, err, call, ret)
}

func (h *linHistory) leaseOp(client int, kind linKind, l *lease) error {
	call := h.clock.Add(1)
	var err error
	switch kind {
	case linHeartbeat:
		err = l.Heartbeat(nil)
	case linComplete:
		err = l.Complete()
	case linFail:
		err = l.Fail(errors.New("lin: attempt failed"))
	}
	ret := h.clock.Add(1)
	out := linOutput{ok: err == nil}
	var lost *leaserouter.LeaseLostError
	switch {
	case err == nil:
	case errors.As(err, &lost):
		out.token, out.refused, out.reason = lost.Current, lost.Token, string(lost.Reason)
	default:
		out.err = err.Error()
	}
	h.add(client, linInput{kind: kind, job: l.JobID, token: l.Token}, out, call, ret)
	return err
}

func (h *linHistory) expire(r *router, client int, id string) {
	call := h.clock.Add(1)
	ok := leaserouter.ExpireNow(r, id)
	ret := h.clock.Add(1)
	h.add(client, linInput{kind: linExpire, job: id}, linOutput{ok: ok}, call, ret)
}

func (h *linHistory) get(r *router, client int, id string) {
	call := h.clock.Add(1)
	j, ok := r.Get(id)
	ret := h.clock.Add(1)
	h.add(client, linInput{kind: linGet, job: id}, linOutput{ok: ok, state: j.State, token: j.Token, attempt: j.Attempt}, call, ret)
}

// linPool holds the most recent leases granted, shared by zombies (which
// replay them), expirers and the observer (which pick their jobs).
type linPool struct {
	mu     sync.Mutex
	leases [linPoolSize]*lease
	n      int
}

func (p *linPool) add(l *lease) {
	p.mu.Lock()
	p.leases[p.n%linPoolSize] = l
	p.n++
	p.mu.Unlock()
}

func (p *linPool) pick(rng *rand.Rand) *lease {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return nil
	}
	return p.leases[rng.IntN(min(p.n, linPoolSize))]
}

// linCounts are the outcomes a run exercised, counted from its history.
type linCounts struct {
	enqueued, duplicates, acquired, heartbeats, completions, fails, expiries, failedExpiries, stale, gets int
}

func linCount(ops []porcupine.Operation) linCounts {
	var c linCounts
	for _, op := range ops {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		switch {
		case in.kind == linEnqueue && out.ok:
			c.enqueued++
		case in.kind == linEnqueue:
			c.duplicates++
		case in.kind == linAcquire && out.ok:
			c.acquired++
		case in.kind == linExpire && out.ok:
			c.expiries++
		case in.kind == linExpire:
			c.failedExpiries++
		case in.kind == linGet:
			c.gets++
		case !out.ok && out.err == "":
			c.stale++ // a lease operation refused with a LeaseLostError
		case in.kind == linHeartbeat && out.ok:
			c.heartbeats++
		case in.kind == linComplete && out.ok:
			c.completions++
		case in.kind == linFail && out.ok:
			c.fails++
		}
	}
	return c
}

// linOverlaps counts the operations that started while another operation
// on the same job was in flight: the ones whose order the checker had to
// search for. It is only logged, since how much calls overlap depends on
// the scheduler.
func linOverlaps(ops []porcupine.Operation) int {
	sorted := slices.Clone(ops)
	slices.SortFunc(sorted, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	lastReturn := map[string]int64{}
	n := 0
	for _, op := range sorted {
		id := op.Input.(linInput).job
		if ret, ok := lastReturn[id]; ok && op.Call < ret {
			n++
		}
		lastReturn[id] = max(lastReturn[id], op.Return)
	}
	return n
}

// linRun runs the workload against a fresh Router and returns its history
// and final Stats. (The proof that this kind of check catches a broken
// router, a backend accepting a superseded lease, is the conformance
// suite's own test: internal/routertest/proof_test.go.)
func linRun(t *testing.T, seed uint64) ([]porcupine.Operation, leaserouter.Stats, int64) {
	r, err := leaserouter.New[string](leaserouter.Options{
		LeaseDuration: time.Hour, // only forced expiries happen
		MaxAttempts:   linMaxAttempts,
		Backoff:       func(int) time.Duration { return 0 }, // Fail makes the job pending at once
	})
	require.NoError(t, err)
	// Close revokes the leases zombies still hold (its ctx is done at once)
	// and stops the reaper before goleak looks.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	defer r.Close(done)

	h := &linHistory{}
	h.budget.Store(linOps)
	var (
		nextJob atomic.Int64
		pool    linPool
		start   = make(chan struct{})
		wg      sync.WaitGroup
	)
	// take yields, so the goroutines interleave finely even on few cores,
	// and says whether the budget allows another operation. Only recorded
	// operations spend it (ErrNoJob, an empty pool do not), so a run
	// records linOps operations (a few more: goroutines race for the last)
	// however the goroutines are scheduled.
	take := func() bool {
		runtime.Gosched()
		return h.budget.Load() > 0
	}
	goroutine := func(client int, body func(rng *rand.Rand)) {
		wg.Go(func() {
			<-start
			body(rand.New(rand.NewPCG(seed, uint64(client))))
		})
	}
	client := 0
	next := func() int { client++; return client }

	// Enqueuers: a new job while few are pending, otherwise a recent ID
	// again (a duplicate).
	for range 2 {
		c := next()
		goroutine(c, func(rng *rand.Rand) {
			for take() {
				n := nextJob.Load()
				if r.Stats().Pending < linMaxPending || n == 0 {
					n = nextJob.Add(1)
				} else {
					n -= int64(rng.IntN(int(min(n, 8))))
				}
				h.enqueue(r, c, fmt.Sprintf("job-%d", n))
			}
		})
	}
	// Workers: acquire, heartbeat a few times, then complete or fail; a
	// refused operation makes them drop the lease.
	for range 3 {
		c := next()
		goroutine(c, func(rng *rand.Rand) {
			var cur *lease
			for take() {
				if cur == nil {
					if cur = h.acquire(r, c, fmt.Sprintf("worker-%d", c)); cur != nil {
						pool.add(cur)
					}
					continue
				}
				kind := linHeartbeat
				switch p := rng.IntN(20); {
				case p < 5:
					kind = linComplete
				case p < 8:
					kind = linFail
				}
				if err := h.leaseOp(c, kind, cur); err != nil || kind != linHeartbeat {
					cur = nil
				}
			}
		})
	}
	// Zombies: acquire now and then, keep every lease, and replay their own
	// or the pool's leases whatever became of them.
	for range 2 {
		c := next()
		goroutine(c, func(rng *rand.Rand) {
			var kept []*lease
			for take() {
				if rng.IntN(4) == 0 {
					// Zombies take leases in batches, to put TryAcquireMany
					// in the history.
					for _, l := range h.acquireMany(r, c, fmt.Sprintf("zombie-%d", c), 1+rng.IntN(3)) {
						kept = append(kept, l)
						pool.add(l)
					}
					continue
				}
				l := pool.pick(rng)
				if len(kept) > 0 && rng.IntN(2) == 0 {
					l = kept[rng.IntN(len(kept))]
				}
				if l == nil {
					continue
				}
				_ = h.leaseOp(c, linKind(int(linHeartbeat)+rng.IntN(3)), l) // refusals are the point
			}
		})
	}
	// Expirers force the expiry of a recently leased job.
	for range 2 {
		c := next()
		goroutine(c, func(rng *rand.Rand) {
			for take() {
				if l := pool.pick(rng); l != nil {
					h.expire(r, c, l.JobID)
				}
			}
		})
	}
	// Observer: Get of a recently leased job.
	c := next()
	goroutine(c, func(rng *rand.Rand) {
		for take() {
			if l := pool.pick(rng); l != nil {
				h.get(r, c, l.JobID)
			}
		}
	})
	close(start)
	wg.Wait()

	require.NoError(t, r.Audit())
	return h.ops, r.Stats(), h.noJob.Load()
}

// linCheck checks a history against linModel and returns the result. When
// it is not want, the visualization is written to a file named in the log.
func linCheck(t *testing.T, ops []porcupine.Operation, want porcupine.CheckResult) porcupine.CheckResult {
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(linModel, ops, 10*time.Second)
	t.Logf("checked %d operations in %v: %v", len(ops), time.Since(start), res)
	if res != want {
		if f, err := os.CreateTemp("", "leaserouter-linearizability-*.html"); err == nil {
			if err := porcupine.Visualize(linModel, info, f); err == nil {
				t.Logf("visualization: %s", f.Name())
			}
			f.Close()
		}
	}
	return res
}

// TestLinearizable checks that a concurrent history of lease operations,
// with zombies replaying superseded leases and forced expiries, is
// linearizable against the sequential contract of a job, and that the run
// exercised every outcome that matters. The recorded outcomes must also
// agree with the Router's own totals.
func TestLinearizable(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ops, st, noJob := linRun(t, seed)
	c := linCount(ops)
	t.Logf("history: %d operations (%d TryAcquire ErrNoJob left out), %d overlapping another on the same job; %+v",
		len(ops), noJob, linOverlaps(ops), c)

	require.Equal(t, porcupine.Ok, linCheck(t, ops, porcupine.Ok), "history is not linearizable (seed %d)", seed)

	require.GreaterOrEqual(t, c.expiries, linMinCount, "forced expiries that took effect")
	require.GreaterOrEqual(t, c.stale, linMinCount, "stale lease operations refused")
	require.GreaterOrEqual(t, c.completions, linMinCount, "completions accepted")
	require.GreaterOrEqual(t, c.heartbeats, linMinCount, "heartbeats accepted")

	// Nothing else expires, fails or is refused in this run, so the Router's
	// totals must match what the history saw.
	require.Equal(t, uint64(c.enqueued), st.Enqueued, "Enqueued")
	require.Equal(t, uint64(c.duplicates), st.Duplicates, "Duplicates")
	require.Equal(t, uint64(c.acquired), st.LeasesGranted, "LeasesGranted")
	require.Equal(t, uint64(c.heartbeats), st.Heartbeats, "Heartbeats")
	require.Equal(t, uint64(c.expiries), st.Expirations, "Expirations")
	require.Equal(t, uint64(c.stale), st.StaleRejections, "StaleRejections")
	require.Equal(t, c.completions, st.Succeeded, "Succeeded")
	require.Zero(t, st.Purged, "no job is purged within Retention")
}
