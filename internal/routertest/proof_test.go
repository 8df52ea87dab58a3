package routertest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/routertest"
)

// recorder is a routertest.T that records a failure instead of failing
// the test: FailNow ends the row's goroutine, as testing.T's does.
type recorder struct {
	ctx      context.Context
	name     string
	mu       sync.Mutex
	failed   bool
	logs     []string
	cleanups []func()
}

func (r *recorder) Helper()                  {}
func (r *recorder) Name() string             { return r.name }
func (r *recorder) Context() context.Context { return r.ctx }
func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}
func (r *recorder) Errorf(format string, args ...any) {
	r.Logf(format, args...)
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}
func (r *recorder) FailNow() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// record runs body with a recorder in a goroutine of its own (FailNow
// ends it) and then its cleanups; it returns the recorder.
func record(ctx context.Context, name string, body func(t routertest.T)) *recorder {
	rec := &recorder{ctx: ctx, name: name}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(rec)
	}()
	<-done
	for i := len(rec.cleanups) - 1; i >= 0; i-- {
		rec.cleanups[i]()
	}
	return rec
}

// runRow runs the named row against a fake with bug, in a synctest
// bubble, and reports whether it failed, with its log.
func runRow(t *testing.T, bug, row string) (failed bool, log string) {
	h := fakeHarness{bug: bug}
	synctest.Test(t, func(t *testing.T) {
		rec := record(t.Context(), row, func(rt routertest.T) { routertest.RunRow(rt, h, row) })
		failed, log = rec.Failed(), strings.Join(rec.logs, "\n")
	})
	return failed, log
}

// workload runs the linearizability workload against a fake with bug and
// returns the counts of its history, checked against want. A planted bug
// may instead be caught by the workload's own checks before the history
// is complete (a KeepAlive that should have lost its lease keeps it, say):
// with want Illegal that counts as caught, and caught is true (no counts).
// The workload is random: a run may miss a planted bug (the shortening
// heartbeat, in about one seed of 40), so a broken fake gets up to
// bugRuns seeds and must be caught in one; the honest fake gets one,
// which must pass.
func workload(t *testing.T, bug string, want porcupine.CheckResult) (c routertest.LinCounts, caught bool) {
	h := fakeHarness{bug: bug}
	runs := 1
	if want == porcupine.Illegal {
		runs = bugRuns
	}
	var seeds []uint64
	for range runs {
		seed := uint64(time.Now().UnixNano())
		seeds = append(seeds, seed)
		var (
			ops    []porcupine.Operation
			failed bool
			log    string
		)
		synctest.Test(t, func(t *testing.T) {
			rec := record(t.Context(), "workload", func(rt routertest.T) { ops = routertest.Workload(rt, h, routertest.LinConfig{}, seed).Ops() })
			failed, log = rec.Failed(), strings.Join(rec.logs, "\n")
		})
		if failed && want == porcupine.Illegal {
			t.Logf("bug %q caught by the workload itself (seed %d):\n%s", bug, seed, log)
			return c, true
		}
		require.False(t, failed, "the workload ran (seed %d): %s", seed, log)
		if routertest.Check(t, ops, want, time.Minute) == want {
			return routertest.Count(ops), false
		}
	}
	t.Fatalf("the history was not %v in %d runs (seeds %v)", want, runs, seeds)
	return c, false
}

// bugRuns is how many seeded runs of the workload a planted bug gets.
const bugRuns = 4

// TestSuiteCatchesStaleTokenBackend: a backend whose lease operations
// skip the token check (a superseded lease is accepted while its job is
// leased to another) fails the one-valid-lease rows, and its concurrent
// history is found illegal; the same backend without the bug passes both.
func TestSuiteCatchesStaleTokenBackend(t *testing.T) {
	for _, row := range []string{
		"one valid lease/expired lease refused, job leased again",
		"one valid lease/refused operation changes nothing",
	} {
		failed, log := runRow(t, "", row)
		require.False(t, failed, "the honest fake passes %q:\n%s", row, log)
		failed, log = runRow(t, bugStaleToken, row)
		require.True(t, failed, "the row %q missed the planted bug", row)
		require.Contains(t, log, "LeaseLostError", "%q fails where a stale lease was accepted", row)
		t.Logf("%q on the broken fake:\n%s", row, log)
	}
	c, _ := workload(t, "", porcupine.Ok)
	t.Logf("honest fake: %+v", c)
	workload(t, bugStaleToken, porcupine.Illegal)
}

// TestSuiteCatchesShorteningHeartbeat: a backend whose heartbeat can
// shorten a lease fails the heartbeat row; without the bug it passes.
func TestSuiteCatchesShorteningHeartbeat(t *testing.T) {
	const row = "heartbeat/never shortens, never changes the token, stores progress"
	failed, log := runRow(t, "", row)
	require.False(t, failed, "the honest fake passes:\n%s", log)
	failed, log = runRow(t, bugShortHeartbeat, row)
	require.True(t, failed, "the heartbeat row missed the planted bug")
	require.Contains(t, log, "extends the lease")
	t.Logf("on the broken fake:\n%s", log)
	workload(t, bugShortHeartbeat, porcupine.Illegal) // its job leased again while the lease is valid by the contract
}

// TestSuiteCatchesExpiryLeavingLeaseValid: a backend whose forced expiry
// (Expirer) reports a leased job expired but leaves its lease valid has a
// concurrent history found illegal (the lease is used, or the job read
// leased, after it expired); without the bug it is linearizable, with
// forced expiries taking effect.
func TestSuiteCatchesExpiryLeavingLeaseValid(t *testing.T) {
	c, _ := workload(t, "", porcupine.Ok)
	t.Logf("honest fake: %+v", c)
	require.Positive(t, c.Forced, "forced expiries took effect on the honest fake")
	if c, caught := workload(t, bugExpireKeepsLease, porcupine.Illegal); !caught {
		require.Positive(t, c.Forced, "the broken fake reported forced expiries")
	}
}

// TestLinearizableCloseOutOfTimeKeepsItsLeasesValid: a Close that says
// its revocation did not finish (a done ctx's grace ran out, as
// pgrouter's round trip can on a busy machine) leaves its leases valid
// until their expiry, and their holders' heartbeats accepted after it:
// that history is linearizable. A Close that revokes nothing yet returns
// as if it had revoked everything has an illegal one.
func TestLinearizableCloseOutOfTimeKeepsItsLeasesValid(t *testing.T) {
	c, _ := workload(t, closeOutOfTime, porcupine.Ok)
	t.Logf("Close out of time: %+v", c)
	require.Positive(t, c.RevokesUnfinished, "the workload saw the revocation unfinished")
	require.Zero(t, c.Revoked, "nothing refused as revoked: nothing was")
	workload(t, bugCloseClaimsRevoked, porcupine.Illegal)
}

// TestSuiteCatchesHolderEndCountedAsRefusal: a backend whose KeepAlive is
// not told of its holder's own end (its context lives on, its next
// heartbeat refused and counted) fails the holder's-end row; without the
// bug it passes.
func TestSuiteCatchesHolderEndCountedAsRefusal(t *testing.T) {
	const row = "workers/the holder's own end of a kept lease is no refusal: KeepAlive's ctx ends at once with the reason"
	failed, log := runRow(t, "", row)
	require.False(t, failed, "the honest fake passes:\n%s", log)
	failed, log = runRow(t, bugHolderEndUntold, row)
	require.True(t, failed, "the row missed the planted bug")
	require.Contains(t, log, "the KeepAlive ctx ends as the holder's call returns")
	t.Logf("on the broken fake:\n%s", log)
}

// TestSuiteCatchesPlantedBugs: for each row below, a backend with the
// planted bug fails it, with the message named; the same backend without
// the bug passes it.
//   - a tick whose Payload panics enqueued with the zero payload, not
//     skipped: the panicking-Payload row;
//   - Close stopping the periodic jobs without waiting for a Payload call
//     in progress: the Close row;
//   - RemovePeriodic stopping every periodic job: the RemovePeriodic row;
//   - bad input refused with the right kind of error (errors.Is passes)
//     but not the message every backend gives: the one-message row;
//   - a snooze counting the attempt: the row of a snooze on the last
//     attempt;
//   - a job canceled while scheduled made ready at its run-at: the row
//     of a canceled scheduled job;
//   - a tick whose Payload ran when Close began enqueued: the Close row;
//   - a snooze dropping the job's metadata: the metadata row.
func TestSuiteCatchesPlantedBugs(t *testing.T) {
	for _, c := range []struct{ bug, row, want string }{
		{bugPanickedTickEnqueued, "periodic/a panicking Payload skips that tick only, counted in CallbackPanics",
			"whose Payload panicked has no job"},
		{bugCloseLeavesScheduler, "periodic/Close waits for the scheduler: a Payload in progress has returned, none called after",
			"while Payload ran"},
		{bugRemoveStopsAll, "periodic/RemovePeriodic stops only its own ticks", "the other periodic job's later ticks"},
		{bugBareErrors, "bad input/the same bad call gets the same message on every backend", "TryAcquireMany of 0"},
		{bugSnoozeCounts, "snooze/on the last attempt, not dead; LastError and checkpoint kept", "not dead, whatever the attempts"},
		{bugCanceledScheduledWakes, "cancel/a canceled scheduled job never becomes ready: not at its run-at, nor after its backoff",
			"a canceled job never is"},
		{bugStoppedTickEnqueued, "periodic/Close waits for the scheduler: a Payload in progress has returned, none called after",
			"the tick whose Payload ran when Close began gets no job"},
		{bugSnoozeDropsMetadata, "metadata/read back in Get and the lease; kept across a failed attempt and Snooze",
			"kept across a Snooze"},
	} {
		t.Run(c.bug, func(t *testing.T) { requireRowCatches(t, c.row, c.bug, c.want) })
	}
}

// requireRowCatches runs row on the honest fake, which must pass it, and
// on the fake with bug, which must fail it with a log containing want.
func requireRowCatches(t *testing.T, row, bug, want string) {
	t.Helper()
	failed, log := runRow(t, "", row)
	require.False(t, failed, "the honest fake passes %q:\n%s", row, log)
	failed, log = runRow(t, bug, row)
	require.True(t, failed, "the row %q missed the planted bug %q", row, bug)
	require.Contains(t, log, want)
	t.Logf("on the broken fake:\n%s", log)
}
