package leaserouter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/hook"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Races in a forced order: each call held at a gate the test opens

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

// harnessReaper holds the reaper where its ReaperWoke signal is called —
// woken for a deadline, before its pass, with the router's lock free —
// until release, after which it lets it run on: calls meet what is due
// before the reaper settles it, as whenever the reaper runs late. Install
// it with SetHooks(r, &hook.Hooks{ReaperWoke: h.woke}).
type harnessReaper struct {
	wakes   chan struct{} // one per wake-up (a buffer of them: never blocks the reaper)
	proceed chan struct{}
	release func()
}

// newHarnessReaper must be called after setup: its cleanup (release) then
// runs before setup's Close, which waits for the reaper.
func newHarnessReaper(t *testing.T) *harnessReaper {
	h := &harnessReaper{wakes: make(chan struct{}, 64), proceed: make(chan struct{})}
	h.release = sync.OnceFunc(func() { close(h.proceed) })
	t.Cleanup(h.release)
	return h
}

func (h *harnessReaper) woke() {
	select {
	case h.wakes <- struct{}{}:
	default:
	}
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

// TestStaleHolderRefusedAndFencedAfterReacquire: worker A leases a
// job, writes downstream through a Fence, then stalls past its expiry; B
// re-acquires with a higher token and writes; A wakes believing it still
// holds the job. A's Complete, Fail, Release and Heartbeat are refused
// with LeaseLostError{Token: a, Current: b}, the Fence blocks A's write
// after B's, and B's lease is untouched. Forced both ways: the reaper
// settles A's expiry first, or is held, woken for it and before its pass,
// while B's acquire settles it.
func TestStaleHolderRefusedAndFencedAfterReacquire(t *testing.T) {
	for _, held := range []bool{false, true} {
		name := map[bool]string{false: "reaper-first", true: "reaper-held"}[held]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bad := harnessStale(t, held)
				require.Empty(t, bad)
			})
		})
	}
}

// harnessStale plays that story and returns what went wrong instead of
// failing, so that each check's failure is reported (with the token check
// removed from lease.go's valid, the stale Complete is the first caught).
// Steps that do not depend on the token check use require.
func harnessStale(t *testing.T, held bool) []string {
	var bad []string
	badf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	rec := &recorder{}
	r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: hourBackoff, OnEvent: rec.record})
	hooks := &hook.Hooks{}
	hr := newHarnessReaper(t)
	if held {
		hooks.ReaperWoke = hr.woke
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
		receive(t, hr.wakes) // the reaper woke for A's expiry and is held before its pass
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

// TestLeaseOperationRacingTheReaperDecidedByTheClock: a Heartbeat or
// Complete lands at the lease's expiry while the reaper, woken for it, is
// held before its pass (a reaper running late); or it lands 1ns before
// the expiry. Either the operation won (job as it left it, no expiry
// counted) or the expiry did (operation refused, exactly one
// lease_expired, job pending — or dead with no attempts left), never a
// mix, and Stats, events and Audit agree. The clock decides which: the
// lease is valid until its expiry and lost at it, whatever the reaper is
// doing. A TryAcquire in the window gets the job, and the released reaper
// leaves the new lease alone.
func TestLeaseOperationRacingTheReaperDecidedByTheClock(t *testing.T) {
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
				where := map[bool]string{false: "before-expiry", true: "in-window"}[inWindow]
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
			leaserouter.SetHooks(r, &hook.Hooks{ReaperWoke: hr.woke})
			require.NoError(t, r.Enqueue("j", ""))
			a := acquire(t, r, "A")
			sleep(ld)
			receive(t, hr.wakes)    // the reaper woke for A's expiry and is held before its pass
			b := acquire(t, r, "B") // settles A's expiry itself, at its instant
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
	leaserouter.SetHooks(r, &hook.Hooks{ReaperWoke: hr.woke})
	require.NoError(t, r.Enqueue("j", ""))
	a := acquire(t, r, "A")
	var err error
	var at time.Time
	if inWindow {
		sleep(ld) // the reaper wakes at the expiry and is held before its pass
		receive(t, hr.wakes)
		at = time.Now()
		err = do(a) // at the expiry, the reaper not yet run: lost, settled by the call
		hr.release()
		synctest.Wait() // the reaper's pass finds nothing left
	} else {
		sleep(ld - time.Nanosecond)
		at = time.Now()
		err = do(a) // before the expiry
		// The reaper wakes at the old expiry and finds nothing expired.
		sleep(time.Nanosecond)
		receive(t, hr.wakes)
		hr.release()
		synctest.Wait()
	}
	won := harnessReaperOutcome(t, r, rec, name, a, err, at, maxAtt)
	require.Equal(t, !inWindow, won, "valid until the expiry, lost at it: %v", err)
	if won && name == "Heartbeat" {
		// The extended lease expires in its turn, at its new expiry, once.
		sleep(time.Until(a.Expiry()))
		synctest.Wait() // the reaper, no longer held, settles it
		expired := rec.ofKind(leaserouter.EventLeaseExpired)
		require.Len(t, expired, 1)
		requireTime(t, at.Add(ld), expired[0].Time, "lease_expired at the extended expiry")
		st := r.Stats()
		require.EqualValues(t, 1, st.Expirations)
		require.EqualValues(t, len(rec.ofKind(leaserouter.EventDead)), st.Dead)
		require.Equal(t, maxAtt == 1, get(t, r, "j").State == leaserouter.StateDead)
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
		want, kinds = leaserouter.StateDead, []string{"enqueued", "lease_acquired", "lease_expired", "dead", "stale_rejected"}
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
		leaserouter.StateDead, "failed", []string{"failed", "dead"}, "harness: fatal"},
	{"Release", (*lease).Release, leaserouter.StatePending, "released", []string{"released"}, ""},
}

// TestRacingEndingOperationsOneWins: two operations that end a lease (Complete,
// Fail, Fail(Permanent), Release) race on one lease. Exactly one wins —
// in a forced order the first — the loser is refused with the winner's
// reason, and the job's state, LastError and events are the winner's.
func TestRacingEndingOperationsOneWins(t *testing.T) {
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

// TestCompleteOfOneLeaseAtOnceSucceedsOnce: eight goroutines complete one lease.
// Exactly one wins (in a forced order the first); seven are refused with
// reason "completed"; one completed event, seven stale_rejected.
func TestCompleteOfOneLeaseAtOnceSucceedsOnce(t *testing.T) {
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

// TestEnqueueOfOneIDAtOnceStoresOne: eight goroutines enqueue one ID with different
// payloads. Exactly one is stored (in a forced order the first, with its
// payload); seven get ErrDuplicate and change nothing.
func TestEnqueueOfOneIDAtOnceStoresOne(t *testing.T) {
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

// TestCancelRacingAcquireLeavesNoLiveLease races Cancel against acquiring one job, in
// every order: Cancel first (no lease is ever granted), acquire first (the
// lease is lost at once, refused with reason "canceled"), at once (one of
// those two, consistently), and Cancel landing inside a blocked Acquire
// after its waiter was woken for the job and before the grant (the waiter
// gets nothing, keeps waiting, and takes the next job).
func TestCancelRacingAcquireLeavesNoLiveLease(t *testing.T) {
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

// TestCrashedWorkersJobLeasedUntilExactlyItsExpiry: three workers in turn lease a job, checkpoint
// and crash. Each time the job stays leased until exactly its expiry
// (expiry-1ns: leased to the crashed worker, unavailable; expiry: pending),
// and the next lease has attempt+1, a higher token and the checkpoint. At
// MaxAttempts the expiry makes the job dead, and dead never changes again:
// Cancel returns nil and changes nothing, Enqueue is a duplicate, every old
// lease is refused, and time passing changes nothing.
func TestCrashedWorkersJobLeasedUntilExactlyItsExpiry(t *testing.T) {
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
				require.Equal(t, leaserouter.StateDead, j.State, "attempts exhausted: dead at the last expiry")
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
		require.Equal(t, 1, st.DeadJobs)
		require.Equal(t, 1, st.Failed, "the deprecated name counts the same")

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

// TestAcquireDeadlineExactAndSwallowsNoJob: a blocked Acquire with a deadline returns
// context.DeadlineExceeded at exactly the deadline (blocked at
// deadline-1ns) and swallows no job. Forced: the deadline passes before
// the job arrives (the job waits for the next taker); the job arrives
// first (the lease is returned and the deadline changes nothing); the
// deadline strikes right after the waiter was woken for the job (the
// waiter returns DeadlineExceeded and passes the job on, to the next waiter
// or the next TryAcquire). Free: a job ready exactly at the deadline is
// returned or left pending, never lost.
func TestAcquireDeadlineExactAndSwallowsNoJob(t *testing.T) {
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

// TestCloseWakesEveryBlockedAcquire: Close wakes ten blocked Acquires
// with ErrClosed and leaves no goroutine behind (the bubble would deadlock,
// and goleak would complain). With leases held, the waiters are woken at
// once while Close drains: a lease may still complete or release, and the
// one still held when Close's ctx ends is revoked (job pending, attempt
// kept, holder refused with reason "revoked").
func TestCloseWakesEveryBlockedAcquire(t *testing.T) {
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
