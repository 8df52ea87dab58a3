package routertest

// Linearizability of the lease contract, checked with porcupine (Athalye,
// https://github.com/anishathalye/porcupine; the checker is the Wing & Gong
// / Lowe search of Horn and Kroening, "Faster linearizability checking via
// P-compositionality", 2015), written once for every backend.
//
// Goroutines hammer two job sets with the public API. Set A, on
// LinConfig.Handles handles (two Routers on one database, for PostgreSQL):
// enqueuers (Enqueue, EnqueueMany), workers (TryAcquire, Heartbeat,
// Complete, Fail, Release), keepers (a lease under KeepAlive, used after
// waits longer than the lease), zombies (TryAcquireMany, then replaying
// every lease they saw, never heartbeating) and an observer (Get). Set R
// is Run's: an enqueuer feeds it, Run (Batch 1, so every lease it takes
// reaches a handler) works it, its handlers heartbeat, return nil, an
// error or a Permanent one, and Run's zombies release, fail, complete and
// heartbeat the leases its handlers hold, so that Run ends leases no
// longer valid. Each call is recorded as a porcupine Operation whose Call
// and Return come from one shared atomic counter read just before the
// call and just after it returns, so the intervals respect real time
// across goroutines. At the end the handles are closed one by one with
// leases still held (the first handle also holding stale leases of jobs
// another handle leased since, whose heartbeats between the Closes check
// that a Close revokes only its own), and every lease is replayed once
// more.
//
// The history is partitioned by job ID (jobs share nothing in the
// contract but the token counter) and each partition is checked against a
// sequential model of one job. Expiry is the one transition no recorded
// call makes, and Advance is the only clock a backend-neutral test has, so
// the model is nondeterministic: before any operation a leased job may
// have expired (pending again with the attempt counted, or dead after its
// last attempt), but not before the contract's bound on the lease's
// expiry: the backend's clock read before the call that granted or last
// heartbeated it, plus LeaseDuration (History.validUntil), against the
// clock read after the operation returned (linInput.at). Without that
// bound a job granted again while its lease is valid was linearizable.
// Instants themselves are checked by the rows.
// Operations Run makes on its own are recorded with the widest interval
// the test can vouch for:
//   - Run's claim of a job: from Run's start to the handler's entry.
//   - Run's ending of a lease after its handler returned: from the return
//     to the end of the workload (Run completes some leases with its next
//     claim); it reports nothing, so the model applies it only if the
//     lease is still the job's valid one, which is what the invariant
//     demands of it: a complete for nil, a fail or release otherwise.
//   - KeepAlive's heartbeats are invisible (they change no state); its
//     context canceled with ErrLeaseLost is recorded as an operation the
//     model accepts only if the lease is no longer valid by then.
//   - Close's revocation: one operation per job over each Close's
//     interval, applied to a job whose latest lease that handle granted
//     (pending again at once, even on its last attempt).
//
// TryAcquire's ErrNoJob is left out ("no job was ready" is a statement
// about every partition, which a per-job model cannot judge); acquire
// order is checked by the rows.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// LinConfig sizes the linearizability workload; zero fields take the
// defaults.
type LinConfig struct {
	Ops      int           // operations recorded; default 3000
	Lease    time.Duration // set A's lease (short: zombies' leases expire); default Harness.Lease()/4
	RunLease time.Duration // set R's lease (Run heartbeats it); default Harness.Lease()
	Handles  int           // handles on set A (processes); default 2
	MinCount int           // each outcome a clean run must have exercised at least this often; default 10
}

// linMaxAttempts bounds attempts, so jobs die of expiry too.
const linMaxAttempts = 4

type linKind uint8

const (
	linEnqueue linKind = iota + 1
	linAcquire
	linHeartbeat
	linComplete
	linFail
	linRelease
	linGet
	linRunComplete // Run ends a lease whose handler returned nil
	linRunFail     // Run ends a lease whose handler returned an error (fail; or release when stopping, or on pgrouter when the lease could not be proven valid)
	linKeepLost    // KeepAlive's ctx canceled with ErrLeaseLost
	linRevoke      // Close revoked what it still held
	linExpire      // Expirer.ExpireNow (Caps.ForcedExpiry)
)

var linKindNames = [...]string{"?", "Enqueue", "Acquire", "Heartbeat", "Complete", "Fail", "Release", "Get",
	"RunComplete", "RunFail", "KeepLost", "Revoke", "ExpireNow"}

func (k linKind) String() string { return linKindNames[k] }

// linInput is an operation's input. For lease operations token is the
// lease's; for an acquire, job and token are what it returned.
type linInput struct {
	kind  linKind
	job   string
	token leaserouter.Token
	perm  bool // linFail, linRunFail: a Permanent error
	// handle: linAcquire, the handle that granted the lease; linRevoke,
	// the handle whose Close revoked.
	handle int
	// at: the backend's clock (Unix ns) when the operation was recorded,
	// after it returned: a lease whose expiry is later than at had not
	// expired when the operation took effect.
	at int64
}

// linOutput is an operation's result.
type linOutput struct {
	ok      bool              // accepted: Enqueue nil, a lease granted, a lease operation nil, Get found, ExpireNow true
	attempt int               // Acquire: the lease's attempt. Get: the job's Attempt
	token   leaserouter.Token // refused lease operation: LeaseLostError.Current. Get: the job's Token
	refused leaserouter.Token // refused lease operation: LeaseLostError.Token
	reason  string            // refused lease operation: LeaseLostError.Reason
	state   leaserouter.State // Get: the job's State
	err     string            // an error the contract does not allow here: the model refuses it
	expiry  int64             // Acquire, accepted Heartbeat: the lease's Expiry (Unix ns) read after the call
}

// linState is the model's state of one job (comparable).
type linState struct {
	known   bool
	state   leaserouter.State
	token   leaserouter.Token // latest lease's token; 0 if never leased
	attempt int               // leases granted so far
	ended   string            // why the latest lease ended, as LeaseLostError.Reason says it
	holder  int               // the handle that granted the latest lease (Close revokes only its own)
	expiry  int64             // the latest lease's expiry as last read (Unix ns; 0: unknown): it cannot expire before
}

// linAfter is where a job goes when a lease ends by expiry, Fail (zero
// backoff) or Release: pending, or dead after its last attempt.
func linAfter(attempt int) leaserouter.State {
	if attempt >= linMaxAttempts {
		return leaserouter.StateFailed
	}
	return leaserouter.StatePending
}

// linStep is the sequential contract of one job from a state in which any
// expiry has already happened; it returns the states the operation may
// leave (none: refused).
func linStep(s linState, in linInput, out linOutput) []linState {
	if out.err != "" {
		return nil
	}
	valid := s.state == leaserouter.StateLeased && in.token == s.token
	end := func(st leaserouter.State, why string) linState {
		s.state, s.ended = st, why
		return s
	}
	switch in.kind {
	case linEnqueue:
		if s.known {
			if out.ok {
				return nil
			}
			return []linState{s}
		}
		if !out.ok {
			return nil
		}
		return []linState{{known: true, state: leaserouter.StatePending}}
	case linAcquire:
		if out.ok && s.known && s.state == leaserouter.StatePending &&
			in.token > s.token && out.attempt == s.attempt+1 && out.attempt <= linMaxAttempts {
			return []linState{{known: true, state: leaserouter.StateLeased, token: in.token, attempt: out.attempt, holder: in.handle, expiry: out.expiry}}
		}
		return nil
	case linHeartbeat, linComplete, linFail, linRelease:
		if in.token > s.token {
			return nil // the lease cannot be used before it was granted
		}
		if !valid {
			reason := s.ended
			if in.token != s.token {
				reason = string(leaserouter.LostSuperseded)
			}
			if !out.ok && out.refused == in.token && out.token == s.token && out.reason == reason {
				return []linState{s}
			}
			return nil
		}
		if !out.ok {
			return nil
		}
		switch in.kind {
		case linComplete:
			return []linState{end(leaserouter.StateSucceeded, string(leaserouter.LostCompleted))}
		case linFail:
			if in.perm {
				return []linState{end(leaserouter.StateFailed, string(leaserouter.LostFailed))}
			}
			return []linState{end(linAfter(s.attempt), string(leaserouter.LostFailed))}
		case linRelease:
			return []linState{end(linAfter(s.attempt), string(leaserouter.LostReleased))}
		}
		s.expiry = max(s.expiry, out.expiry) // a heartbeat never shortens: the later of the two
		return []linState{s}
	case linGet:
		if !s.known {
			if out.ok {
				return nil
			}
			return []linState{s}
		}
		if out.ok && out.state == s.state && out.token == s.token && out.attempt == s.attempt {
			return []linState{s}
		}
		return nil
	case linRunComplete:
		if !valid {
			return []linState{s} // refused: nothing changes
		}
		return []linState{end(leaserouter.StateSucceeded, string(leaserouter.LostCompleted))}
	case linRunFail:
		if !valid {
			return []linState{s}
		}
		if in.perm {
			return []linState{end(leaserouter.StateFailed, string(leaserouter.LostFailed)),
				end(linAfter(s.attempt), string(leaserouter.LostReleased))} // released when Run was stopping
		}
		return []linState{end(linAfter(s.attempt), string(leaserouter.LostFailed)),
			end(linAfter(s.attempt), string(leaserouter.LostReleased))}
	case linKeepLost:
		if valid {
			return nil // KeepAlive reported a valid lease lost
		}
		return []linState{s}
	case linRevoke:
		if s.state != leaserouter.StateLeased || s.holder != in.handle {
			return []linState{s} // Close revokes only what its own Router granted
		}
		// Revoked: pending again at once with the attempt counted, never
		// dead (DESIGN-postgres: Close; the core's revokeLease).
		return []linState{end(leaserouter.StatePending, string(leaserouter.LostRevoked))}
	case linExpire:
		// A forced expiry, at any instant: true iff the job was leased,
		// which it no longer is (pending with the attempt counted, or
		// dead after its last attempt); false changes nothing.
		if s.state != leaserouter.StateLeased {
			if out.ok {
				return nil
			}
			return []linState{s}
		}
		if !out.ok {
			return nil
		}
		return []linState{end(linAfter(s.attempt), string(leaserouter.LostExpired))}
	}
	return nil
}

// LinModel is the sequential contract of one job, with expiry as a
// nondeterministic transition before every operation.
var LinModel = porcupine.NondeterministicModel{
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
	Init: func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		starts := []linState{s}
		// A lease expires only at its expiry: an operation recorded
		// before the expiry last read (with a millisecond for a server's
		// microsecond timestamps) took effect while the lease was valid.
		if s.state == leaserouter.StateLeased && in.at+int64(time.Millisecond) >= s.expiry {
			e := s
			e.state, e.ended = linAfter(s.attempt), string(leaserouter.LostExpired)
			starts = append(starts, e)
		}
		var next []any
		for _, st := range starts {
			for _, n := range linStep(st, in, out) {
				if !contains(next, n) {
					next = append(next, n)
				}
			}
		}
		return next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		return fmt.Sprintf("%v(%s, %d, perm=%v, handle=%d, at=%d) -> %+v", in.kind, in.job, in.token, in.perm, in.handle, in.at, out)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(linState)) },
}

func contains(xs []any, x linState) bool {
	for _, y := range xs {
		if y.(linState) == x {
			return true
		}
	}
	return false
}

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

// LinCounts are the outcomes a run exercised, counted from its history.
type LinCounts struct {
	Enqueued, Duplicates, Acquired, Heartbeats, Completions, Ended, Expired, Superseded, Gets,
	RunEnds, KeepLost, Revoked int
	Refused              int // lease operations refused with a LeaseLostError, whatever the reason
	Forced, ForcedMissed int // ExpireNow true (a leased job expired), false
}

// Count counts the outcomes of ops.
func Count(ops []porcupine.Operation) LinCounts {
	var c LinCounts
	for _, op := range ops {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		switch {
		case in.kind == linEnqueue && out.ok:
			c.Enqueued++
		case in.kind == linEnqueue:
			c.Duplicates++
		case in.kind == linAcquire && out.ok:
			c.Acquired++
		case in.kind == linGet:
			c.Gets++
		case in.kind == linRunComplete || in.kind == linRunFail:
			c.RunEnds++
		case in.kind == linKeepLost:
			c.KeepLost++
		case in.kind == linRevoke:
		case in.kind == linExpire && out.ok:
			c.Forced++
		case in.kind == linExpire:
			c.ForcedMissed++
		case !out.ok && out.reason != "":
			c.Refused++
			c.countRefusal(out.reason)
		case in.kind == linHeartbeat && out.ok:
			c.Heartbeats++
		case in.kind == linComplete && out.ok:
			c.Completions++
		case out.ok:
			c.Ended++ // Fail, Release
		}
	}
	return c
}

func (c *LinCounts) countRefusal(reason string) {
	switch leaserouter.LostReason(reason) {
	case leaserouter.LostExpired:
		c.Expired++
	case leaserouter.LostSuperseded:
		c.Superseded++
	case leaserouter.LostRevoked:
		c.Revoked++
	}
}

// Check checks ops against LinModel within limit and returns the result;
// when it is not want, the visualization is written to a file named in
// t's log.
func Check(t T, ops []porcupine.Operation, want porcupine.CheckResult, limit time.Duration) porcupine.CheckResult {
	start := time.Now()
	model := LinModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, limit)
	t.Logf("checked %d operations in %v: %v", len(ops), time.Since(start), res)
	if res != want {
		if res == porcupine.Illegal {
			logIllegal(t, ops)
		}
		if f, err := os.CreateTemp("", "leaserouter-linearizability-*.html"); err == nil {
			if err := porcupine.Visualize(model, info, f); err == nil {
				t.Logf("visualization: %s", f.Name())
			}
			f.Close()
		}
	}
	return res
}

// Linearizable runs the workload against h (in h.Scope) and checks its
// history: linearizable, and every outcome exercised.
func Linearizable(t *testing.T, h Harness, cfg LinConfig) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var ops []porcupine.Operation
	var noJob int64
	var totals *leaserouter.Stats
	var closing int64
	h.Scope(t, func(t *testing.T) {
		hist := Workload(t, h, cfg, seed)
		ops, noJob, totals, closing = hist.Ops(), hist.noJob.Load(), hist.totals, hist.closing
	})
	c := Count(ops)
	t.Logf("history on %s: %d operations (%d TryAcquire ErrNoJob left out), %d overlapping another on the same job; %+v",
		h.Name(), len(ops), noJob, overlaps(ops), c)
	require.Equal(t, porcupine.Ok, Check(t, ops, porcupine.Ok, time.Minute), "history is not linearizable (seed %d)", seed)
	minCount := cmp(cfg.MinCount, 10)
	if h.Caps().ForcedExpiry {
		require.GreaterOrEqual(t, c.Forced, minCount, "forced expiries that took effect")
		require.GreaterOrEqual(t, c.ForcedMissed, 1, "forced expiries of a job not leased")
	}
	if ok, why := needs(h.Caps(), "Totals"); ok {
		requireTotals(t, c, Count(returnedBefore(ops, closing)), *totals)
	} else {
		t.Logf("totals: not applicable on %s (needs Totals): %s", h.Name(), why)
	}
	require.GreaterOrEqual(t, c.Superseded, minCount, "operations refused because the lease was superseded")
	require.GreaterOrEqual(t, c.Expired, minCount/2, "operations refused because the lease expired")
	require.GreaterOrEqual(t, c.Completions, minCount, "completions accepted")
	require.GreaterOrEqual(t, c.Heartbeats, minCount, "heartbeats accepted")
	require.GreaterOrEqual(t, c.RunEnds, minCount, "leases Run ended")
	require.GreaterOrEqual(t, c.Revoked, 1, "operations refused because Close revoked the lease")
	require.GreaterOrEqual(t, c.KeepLost, 1, "KeepAlive contexts canceled because the lease was lost")
}

// requireTotals holds a backend's totals (Caps.Totals) to the history's
// counts. Enqueue, Duplicates and LeasesGranted are exact: every call
// that enqueues or grants is recorded (the workload stops Run with
// nothing ready, so no lease Run takes goes unrecorded). The others are
// bounds: KeepAlive's and Run's heartbeats, their refusals, and expiries
// by the clock are not in the history (Run's ends are recorded as
// possible, so Succeeded is not compared), and they are held to what the
// history saw before the first Close (after Close a backend may count
// nothing: the core does not).
func requireTotals(t T, c, beforeClose LinCounts, st leaserouter.Stats) {
	t.Logf("totals: %+v", st)
	require.Equal(t, uint64(c.Enqueued), st.Enqueued, "Enqueued: jobs the history saw accepted")
	require.Equal(t, uint64(c.Duplicates), st.Duplicates, "Duplicates: enqueues the history saw refused")
	require.Equal(t, uint64(c.Acquired), st.LeasesGranted, "LeasesGranted: leases the history saw granted")
	require.GreaterOrEqual(t, st.Heartbeats, uint64(beforeClose.Heartbeats), "Heartbeats: at least those the history saw accepted")
	require.GreaterOrEqual(t, st.StaleRejections, uint64(beforeClose.Refused), "StaleRejections: at least the refusals the history saw")
	require.GreaterOrEqual(t, st.Expirations, uint64(c.Forced), "Expirations: at least the forced ones")
}

// returnedBefore returns the operations of ops that returned before at.
func returnedBefore(ops []porcupine.Operation, at int64) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Return < at {
			out = append(out, op)
		}
	}
	return out
}

// overlaps counts the operations that started while another operation
// on the same job was in flight: the ones whose order the checker had to
// search for. It is only logged: how much calls overlap is the
// scheduler's.
func overlaps(ops []porcupine.Operation) int {
	sorted := slices.Clone(ops)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
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

// logIllegal logs the operations of the first job whose history alone is
// not linearizable, in call order.
func logIllegal(t T, ops []porcupine.Operation) {
	model := LinModel.ToModel()
	for _, part := range model.Partition(ops) {
		if porcupine.CheckOperations(model, part) {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		for _, op := range part {
			t.Logf("  [%d, %d] client %d: %s", op.Call, op.Return, op.ClientId, model.DescribeOperation(op.Input, op.Output))
		}
		return
	}
}

func cmp(v, def int) int {
	if v == 0 {
		return def
	}
	return v
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
	// next heartbeat is refused (so every run records a loss).
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
		goroutine(func(c int, b Backend, rng *rand.Rand) {
			for take(rng) {
				if l := pool.pick(rng); l != nil {
					hist.expire(ctx, expirer(t, setOf(l.JobID(), b)), c, l.JobID())
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
		if err := b.Close(done); err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
		ret := hist.now()
		for id := range seen {
			hist.add(0, linInput{kind: linRevoke, job: id, handle: handleOf(b)}, linOutput{ok: true}, call, ret)
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

// expirer returns b as an Expirer, failing t if the harness declared
// ForcedExpiry of a Backend that does not implement it.
func expirer(t T, b Backend) Expirer {
	e, ok := b.(Expirer)
	if !ok {
		t.Errorf("the harness declares ForcedExpiry, but its Backend %T does not implement Expirer", b)
		t.FailNow()
	}
	return e
}
