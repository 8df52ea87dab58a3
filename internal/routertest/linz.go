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
// longer valid. Where the harness declares Caps.ForcedExpiry, an expirer
// forces the expiry of recently leased jobs of both sets at any instant
// (Expirer.ExpireNow, recorded as an operation). Each call is recorded
// as a porcupine Operation whose Call and Return come from one shared
// atomic counter read just before the call and just after it returns, so
// the intervals respect real time across goroutines. At the end the handles are closed one by one with
// leases still held (the first handle also holding stale leases of jobs
// another handle leased since, whose heartbeats between the Closes check
// that a Close revokes only its own), and every lease is replayed once
// more. Where the harness declares Caps.Audit, the backend audits its
// invariants (Auditor) at the end; Caps.Totals, its Stats totals are held
// to the history's counts (requireTotals).
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
// Instants themselves are checked by the rows. A forced expiry is
// recorded, so it is no guess: true iff the job was leased, whose lease
// then ends as by expiry.
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
//     (pending again at once, even on its last attempt). Close is called
//     with a done ctx, and a backend may run out of time revoking (the
//     lease then ends at its expiry): Close returning ctx.Err() itself
//     (or nil) says the revocation finished; any other error, that it may
//     not have, and the model takes either outcome (revokeFinished).
//
// TryAcquire's ErrNoJob is left out ("no job was ready" is a statement
// about every partition, which a per-job model cannot judge); acquire
// order is checked by the rows.

import (
	"fmt"
	"os"
	"slices"
	"sort"
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
		return leaserouter.StateDead
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
				return []linState{end(leaserouter.StateDead, string(leaserouter.LostFailed))}
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
			return []linState{end(leaserouter.StateDead, string(leaserouter.LostFailed)),
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
		// dead (pgrouter's Close; the core's revokeLease).
		kept := s // end changes s
		revoked := end(leaserouter.StatePending, string(leaserouter.LostRevoked))
		if !out.ok {
			// Close said its revocation did not finish (its ctx's grace
			// ran out): the lease was revoked, or is valid until its
			// expiry, as the contract allows; later operations tell which.
			return []linState{revoked, kept}
		}
		return []linState{revoked}
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

// LinCounts are the outcomes a run exercised, counted from its history.
type LinCounts struct {
	Enqueued, Duplicates, Acquired, Heartbeats, Completions, Ended, Expired, Superseded, Gets,
	RunEnds, KeepLost, Revoked int
	RevokesUnfinished    int // jobs of a Close that said its revocation may not have finished
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
		case in.kind == linRevoke && !out.ok:
			c.RevokesUnfinished++
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
// history: linearizable, every outcome exercised at least
// LinConfig.MinCount times (forced expiries too, under
// Caps.ForcedExpiry), and, under Caps.Totals, the backend's Stats
// totals in agreement with it.
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
	if c.RevokesUnfinished == 0 {
		require.GreaterOrEqual(t, c.Revoked, 1, "operations refused because Close revoked the lease")
	} else {
		// A Close out of time (on a busy machine) leaves its leases to
		// their expiry: the history may hold no refusal of a revoked lease.
		t.Logf("revoked: %d refusals; %d revocations of a Close that did not finish revoking", c.Revoked, c.RevokesUnfinished)
	}
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
	t.Logf("totals: Enqueued %d, Duplicates %d, LeasesGranted %d, Heartbeats %d, StaleRejections %d, Expirations %d",
		st.Enqueued, st.Duplicates, st.LeasesGranted, st.Heartbeats, st.StaleRejections, st.Expirations)
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
