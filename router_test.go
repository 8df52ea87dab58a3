package leaserouter_test

// Black-box tests of DESIGN.md, rule by rule, through the exported API only.
// Time is driven with testing/synctest: inside a bubble time.Sleep advances a
// fake clock at once, and synctest.Wait lets every other goroutine in the
// bubble (the reaper, event delivery, workers) run until it blocks. Boundaries
// are probed at d-1ns and at d.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// ld is the LeaseDuration of most tests.
const ld = 10 * time.Second

type (
	router = leaserouter.Router[string]
	lease  = leaserouter.Lease[string]
	job    = leaserouter.Job[string]
)

// setup returns a Router that is closed, then audited, when the test ends.
func setup(t *testing.T, opts leaserouter.Options) *router {
	t.Helper()
	r, err := leaserouter.New[string](opts)
	require.NoError(t, err)
	require.NotNil(t, r)
	t.Cleanup(func() {
		// Bounded so that a test failing while it holds a lease still ends (in
		// a bubble the hour passes at once). Tests that care about Close's
		// result call it themselves; this second call then returns nil.
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		_ = r.Close(ctx)
		require.NoError(t, r.Audit(), "Audit after the scenario")
	})
	return r
}

func acquire(t *testing.T, r *router, worker string) *lease {
	t.Helper()
	l, err := r.TryAcquire(worker)
	require.NoError(t, err)
	require.NotNil(t, l)
	return l
}

func get(t *testing.T, r *router, id string) job {
	t.Helper()
	j, ok := r.Get(id)
	require.True(t, ok, "job %q not found", id)
	return j
}

func requireGone(t *testing.T, r *router, id string) {
	t.Helper()
	j, ok := r.Get(id)
	require.False(t, ok, "job %q still known: %+v", id, j)
}

func requireNoJob(t *testing.T, r *router) {
	t.Helper()
	l, err := r.TryAcquire("probe")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "got lease %+v", l)
	require.Nil(t, l)
}

func requireTime(t *testing.T, want, got time.Time, format string, args ...any) {
	t.Helper()
	require.True(t, want.Equal(got), "want %v, got %v: %s", want, got, fmt.Sprintf(format, args...))
}

// sleep advances the bubble's clock by d, then lets every goroutine of the
// bubble run until it blocks.
func sleep(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// requireLost checks err is a lost-lease refusal for token with the job's
// current token.
func requireLost(t *testing.T, err error, token, current leaserouter.Token) *leaserouter.LeaseLostError {
	t.Helper()
	require.ErrorIs(t, err, leaserouter.ErrLeaseLost)
	var lle *leaserouter.LeaseLostError
	require.ErrorAs(t, err, &lle)
	require.Equal(t, token, lle.Token, "LeaseLostError.Token")
	require.Equal(t, current, lle.Current, "LeaseLostError.Current")
	return lle
}

func noBackoff(int) time.Duration { return 0 }

func hourBackoff(int) time.Duration { return time.Hour }

// recorder is an OnEvent hook that keeps every event.
type recorder struct {
	mu  sync.Mutex
	evs []leaserouter.Event
}

func (rec *recorder) record(e leaserouter.Event) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.evs = append(rec.evs, e)
}

func (rec *recorder) all() []leaserouter.Event {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.evs)
}

func (rec *recorder) of(id string) []leaserouter.Event {
	var out []leaserouter.Event
	for _, e := range rec.all() {
		if e.JobID == id {
			out = append(out, e)
		}
	}
	return out
}

// kinds gives the log messages of job id's events, in order.
func (rec *recorder) kinds(id string) []string { return kindNames(rec.of(id)) }

func (rec *recorder) ofKind(k leaserouter.EventKind) []leaserouter.Event {
	var out []leaserouter.Event
	for _, e := range rec.all() {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func (rec *recorder) last(t *testing.T, id string) leaserouter.Event {
	t.Helper()
	evs := rec.of(id)
	require.NotEmpty(t, evs, "no events for %q", id)
	return evs[len(evs)-1]
}

func kindNames(evs []leaserouter.Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Kind.String())
	}
	return out
}

type result struct {
	l   *lease
	err error
}

func goAcquire(ctx context.Context, r *router, worker string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := r.Acquire(ctx, worker)
		ch <- result{l, err}
	}()
	return ch
}

func goClose(ctx context.Context, r *router) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- r.Close(ctx) }()
	return ch
}

func goRun(ctx context.Context, r *router, opts leaserouter.WorkerOptions, h leaserouter.Handler[string]) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- r.Run(ctx, opts, h) }()
	return ch
}

// requireBlocked checks nothing has been sent on ch yet.
func requireBlocked[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("returned too early: %+v", v)
	default:
	}
}

// receive takes the value already sent on ch.
func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatal("has not returned")
		panic("unreachable")
	}
}

// ---------------------------------------------------------------------------
// Names

func TestStateStringAndTerminal(t *testing.T) {
	tests := []struct {
		s        leaserouter.State
		name     string
		terminal bool
	}{
		{leaserouter.StatePending, "pending", false},
		{leaserouter.StateScheduled, "scheduled", false},
		{leaserouter.StateLeased, "leased", false},
		{leaserouter.StateSucceeded, "succeeded", true},
		{leaserouter.StateFailed, "failed", true},
		{leaserouter.StateCanceled, "canceled", true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.name, tt.s.String())
		require.Equal(t, tt.terminal, tt.s.Terminal(), tt.name)
	}
	require.Equal(t, leaserouter.State(0), leaserouter.StatePending, "zero State is pending")
}

func TestEventKindStrings(t *testing.T) {
	want := []string{"enqueued", "duplicate", "lease_acquired", "lease_extended",
		"lease_expired", "completed", "failed", "retry_scheduled", "dead",
		"stale_rejected", "released", "canceled", "purged"}
	kinds := []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventDuplicate,
		leaserouter.EventLeaseAcquired, leaserouter.EventLeaseExtended, leaserouter.EventLeaseExpired,
		leaserouter.EventCompleted, leaserouter.EventFailed, leaserouter.EventRetryScheduled,
		leaserouter.EventDead, leaserouter.EventStaleRejected, leaserouter.EventReleased,
		leaserouter.EventCanceled, leaserouter.EventPurged}
	for i, k := range kinds {
		require.Equal(t, leaserouter.EventKind(i+1), k, "EventKind values start at 1")
		require.Equal(t, want[i], k.String())
	}
}

// ---------------------------------------------------------------------------
// New

func TestNewDefaults(t *testing.T) {
	require.Equal(t, 30*time.Second, leaserouter.DefaultLeaseDuration)
	require.Equal(t, 5, leaserouter.DefaultMaxAttempts)
	require.Equal(t, 10*time.Minute, leaserouter.DefaultRetention)

	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", "x"))
		j := get(t, r, "a")
		require.Equal(t, leaserouter.DefaultMaxAttempts, j.MaxAttempts)
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 0, j.Priority)

		start := time.Now()
		l := acquire(t, r, "w")
		requireTime(t, start.Add(leaserouter.DefaultLeaseDuration), l.Expiry(), "default LeaseDuration")
		require.NoError(t, l.Complete())

		// Default retention: known for 10m after it finished, not after.
		sleep(leaserouter.DefaultRetention - time.Nanosecond)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
		sleep(time.Nanosecond)
		requireGone(t, r, "a")
		require.Equal(t, uint64(1), r.Stats().Purged)
	})
}

func TestNewDefaultBackoff(t *testing.T) {
	for attempt := -1; attempt <= 64; attempt++ {
		d := leaserouter.DefaultBackoff(attempt)
		require.Greater(t, d, time.Duration(0), "attempt %d", attempt)
		require.LessOrEqual(t, d, 5*time.Minute, "attempt %d: capped at 5m", attempt)
	}
	require.LessOrEqual(t, leaserouter.DefaultBackoff(1), time.Second, "starts from 1s")
	require.Greater(t, leaserouter.DefaultBackoff(20), time.Second, "grows")

	// Options.Backoff nil uses it: the first retry comes within (0, 1s].
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		now := time.Now()
		require.NoError(t, l.Fail(errors.New("boom")))
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateScheduled, j.State)
		require.True(t, j.RunAt.After(now), "RunAt %v", j.RunAt)
		require.False(t, j.RunAt.After(now.Add(time.Second)), "RunAt %v", j.RunAt)
	})
}

func TestNewInvalidOptions(t *testing.T) {
	tests := []struct {
		name  string
		opts  leaserouter.Options
		field string
	}{
		{"negative LeaseDuration", leaserouter.Options{LeaseDuration: -time.Nanosecond}, "LeaseDuration"},
		{"negative MaxAttempts", leaserouter.Options{MaxAttempts: -1}, "MaxAttempts"},
		{"negative Capacity", leaserouter.Options{Capacity: -1}, "Capacity"},
		{"TokenFloor MaxInt64", leaserouter.Options{TokenFloor: math.MaxInt64}, "TokenFloor"},
		{"TokenFloor MaxUint64", leaserouter.Options{TokenFloor: math.MaxUint64}, "TokenFloor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := leaserouter.New[string](tt.opts)
			if r != nil {
				_ = r.Close(context.Background())
			}
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			require.Contains(t, err.Error(), tt.field)
			require.Nil(t, r)
		})
	}

	// Zero and negative Retention are valid; so is a TokenFloor just below the limit.
	for _, opts := range []leaserouter.Options{{Retention: -1}, {TokenFloor: math.MaxInt64 - 1}} {
		r, err := leaserouter.New[string](opts)
		require.NoError(t, err)
		require.NoError(t, r.Close(context.Background()))
	}
}

// ---------------------------------------------------------------------------
// Enqueue

func TestEnqueueDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", "first", leaserouter.WithPriority(1)))
		before := get(t, r, "a")
		stats := r.Stats()

		sleep(time.Second)
		err := r.Enqueue("a", "second", leaserouter.WithPriority(9), leaserouter.WithDelay(time.Hour))
		require.ErrorIs(t, err, leaserouter.ErrDuplicate)
		require.Equal(t, before, get(t, r, "a"), "a duplicate changes nothing")
		stats.Duplicates++
		require.Equal(t, stats, r.Stats())

		// Unfinished: leased.
		l := acquire(t, r, "w")
		require.ErrorIs(t, r.Enqueue("a", "third"), leaserouter.ErrDuplicate)
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateLeased, j.State)
		require.Equal(t, "first", j.Payload)

		// Finished, within retention.
		require.NoError(t, l.Complete())
		require.ErrorIs(t, r.Enqueue("a", "fourth"), leaserouter.ErrDuplicate)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)

		st := r.Stats()
		require.Equal(t, uint64(1), st.Enqueued)
		require.Equal(t, uint64(3), st.Duplicates)
		synctest.Wait()
		dups := rec.ofKind(leaserouter.EventDuplicate)
		require.Len(t, dups, 3)
		for _, e := range dups {
			require.Equal(t, "a", e.JobID)
			require.ErrorIs(t, e.Err, leaserouter.ErrDuplicate)
		}
	})
}

func TestEnqueueDedupWithinRetentionOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{Retention: time.Minute, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", "old"))
		require.NoError(t, acquire(t, r, "w").Complete())

		sleep(time.Minute - time.Nanosecond)
		require.NotContains(t, rec.kinds("a"), "purged")
		require.ErrorIs(t, r.Enqueue("a", "new"), leaserouter.ErrDuplicate)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
		require.Equal(t, 1, r.Stats().Succeeded)

		sleep(time.Nanosecond)
		// The reaper purged it on time, without any call into the Router.
		require.Equal(t, "purged", rec.last(t, "a").Kind.String())
		requireGone(t, r, "a")
		st := r.Stats()
		require.Equal(t, uint64(1), st.Purged)
		require.Equal(t, 0, st.Succeeded, "finished jobs count only while retained")

		require.NoError(t, r.Enqueue("a", "new"))
		j := get(t, r, "a")
		require.Equal(t, "new", j.Payload)
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 0, j.Attempt)
		require.Zero(t, j.Token)
	})
}

func TestEnqueueNegativeRetentionDropsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{Retention: -time.Nanosecond, OnEvent: rec.record})
		for _, id := range []string{"done", "dead", "canceled"} {
			require.NoError(t, r.Enqueue(id, ""))
		}
		require.NoError(t, acquire(t, r, "w").Complete())
		require.NoError(t, acquire(t, r, "w").Fail(leaserouter.Permanent(errors.New("bad"))))
		require.NoError(t, r.Cancel("canceled"))

		for _, id := range []string{"done", "dead", "canceled"} {
			requireGone(t, r, id)
		}
		st := r.Stats()
		require.Equal(t, uint64(3), st.Purged)
		require.Equal(t, uint64(1), st.Dead)
		require.Zero(t, st.Succeeded+st.Failed+st.Canceled)

		require.NoError(t, r.Enqueue("done", "again"), "a dropped ID may be enqueued again")
		synctest.Wait()
		require.Equal(t, []string{"enqueued", "lease_acquired", "completed", "purged", "enqueued"}, rec.kinds("done"))
		require.Equal(t, []string{"enqueued", "canceled", "purged"}, rec.kinds("canceled"))
	})
}

func TestEnqueueInvalidJob(t *testing.T) {
	tests := []struct {
		name string
		id   string
		opts []leaserouter.EnqueueOption
	}{
		{"empty ID", "", nil},
		{"WithMaxAttempts(0)", "a", []leaserouter.EnqueueOption{leaserouter.WithMaxAttempts(0)}},
		{"WithMaxAttempts(-1)", "a", []leaserouter.EnqueueOption{leaserouter.WithMaxAttempts(-1)}},
		{"negative WithDelay", "a", []leaserouter.EnqueueOption{leaserouter.WithDelay(-time.Nanosecond)}},
		{"negative WithDelay after a good option", "a", []leaserouter.EnqueueOption{
			leaserouter.WithPriority(3), leaserouter.WithDelay(-time.Hour)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{OnEvent: rec.record})
				err := r.Enqueue(tt.id, "p", tt.opts...)
				require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
				require.Equal(t, leaserouter.Stats{}, r.Stats(), "nothing stored or counted")
				requireGone(t, r, tt.id)
				requireNoJob(t, r)
				synctest.Wait()
				require.Empty(t, rec.all(), "no event for a refused job")
				if tt.id != "" {
					require.NoError(t, r.Enqueue(tt.id, "p"), "the ID is still free")
				}
			})
		})
	}
}

func TestEnqueueDelayAndRunAtLastWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		t0 := time.Now()
		require.NoError(t, r.Enqueue("delay-last", "",
			leaserouter.WithRunAt(t0.Add(time.Hour)), leaserouter.WithDelay(10*time.Second)))
		require.NoError(t, r.Enqueue("runat-last", "",
			leaserouter.WithDelay(10*time.Second), leaserouter.WithRunAt(t0.Add(time.Hour))))
		require.NoError(t, r.Enqueue("zero-runat-last", "",
			leaserouter.WithDelay(10*time.Second), leaserouter.WithRunAt(time.Time{})))
		require.NoError(t, r.Enqueue("zero-delay-last", "",
			leaserouter.WithRunAt(t0.Add(time.Hour)), leaserouter.WithDelay(0)))

		j := get(t, r, "delay-last")
		require.Equal(t, leaserouter.StateScheduled, j.State)
		requireTime(t, t0.Add(10*time.Second), j.RunAt, "")
		j = get(t, r, "runat-last")
		require.Equal(t, leaserouter.StateScheduled, j.State)
		requireTime(t, t0.Add(time.Hour), j.RunAt, "")
		require.Equal(t, leaserouter.StatePending, get(t, r, "zero-runat-last").State)
		require.Equal(t, leaserouter.StatePending, get(t, r, "zero-delay-last").State)
		require.Equal(t, 2, r.Stats().Scheduled)
		require.Equal(t, 2, r.Stats().Pending)
	})
}

func TestEnqueueRunAtInThePastReadyAtEnqueueTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		t0 := time.Now()
		require.NoError(t, r.Enqueue("first", ""))
		sleep(5 * time.Second)
		require.NoError(t, r.Enqueue("past", "", leaserouter.WithRunAt(t0.Add(-time.Hour))))
		require.Equal(t, leaserouter.StatePending, get(t, r, "past").State)
		// Its ready time is its enqueue time (t0+5s), not its run-at.
		require.Equal(t, "first", acquire(t, r, "w").JobID)
		require.Equal(t, "past", acquire(t, r, "w").JobID)
	})
}

func TestEnqueueCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{Capacity: 2})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, r.Enqueue("b", "", leaserouter.WithDelay(time.Hour)), "scheduled jobs count")
		require.ErrorIs(t, r.Enqueue("c", ""), leaserouter.ErrFull)
		requireGone(t, r, "c")
		require.Equal(t, uint64(2), r.Stats().Enqueued)

		l := acquire(t, r, "w")
		require.ErrorIs(t, r.Enqueue("c", ""), leaserouter.ErrFull, "leased jobs count")
		require.NoError(t, l.Complete())
		require.NoError(t, r.Enqueue("c", ""), "finished jobs do not count")
		require.ErrorIs(t, r.Enqueue("d", ""), leaserouter.ErrFull)
		require.NoError(t, r.Cancel("b"))
		require.NoError(t, r.Enqueue("d", ""))
	})
}

func TestClosedRouterRefusesWorkAndStillAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", "x"))
		require.NoError(t, r.Enqueue("s", "", leaserouter.WithDelay(10*time.Second)))
		require.NoError(t, r.Close(context.Background()))

		require.ErrorIs(t, r.Enqueue("b", ""), leaserouter.ErrClosed)
		l, err := r.TryAcquire("w")
		require.ErrorIs(t, err, leaserouter.ErrClosed)
		require.Nil(t, l)
		l, err = r.Acquire(context.Background(), "w")
		require.ErrorIs(t, err, leaserouter.ErrClosed)
		require.Nil(t, l)
		require.ErrorIs(t, r.Cancel("a"), leaserouter.ErrClosed)
		require.ErrorIs(t, r.Run(context.Background(), leaserouter.WorkerOptions{},
			func(context.Context, *lease) error { return nil }), leaserouter.ErrClosed)
		require.NoError(t, r.Close(context.Background()), "second Close")

		// Get, Stats and Audit answer from the frozen state.
		sleep(time.Hour)
		require.Equal(t, "x", get(t, r, "a").Payload)
		require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
		require.Equal(t, leaserouter.StateScheduled, get(t, r, "s").State, "nothing is settled after Close")
		st := r.Stats()
		require.Equal(t, 1, st.Pending)
		require.Equal(t, 1, st.Scheduled)
		require.Equal(t, uint64(2), st.Enqueued)
		require.NoError(t, r.Audit())
	})
}

// ---------------------------------------------------------------------------
// Order

func TestOrderPriorityThenEnqueueOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		// Same instant (the bubble's clock stands still): ties go to enqueue order.
		require.NoError(t, r.Enqueue("low-1", ""))
		require.NoError(t, r.Enqueue("high", "", leaserouter.WithPriority(5)))
		require.NoError(t, r.Enqueue("neg", "", leaserouter.WithPriority(-1)))
		require.NoError(t, r.Enqueue("low-2", ""))
		require.NoError(t, r.Enqueue("mid", "", leaserouter.WithPriority(1)))
		require.NoError(t, r.Enqueue("low-3", ""))
		var got []string
		for range 6 {
			got = append(got, acquire(t, r, "w").JobID)
		}
		require.Equal(t, []string{"high", "mid", "low-1", "low-2", "low-3", "neg"}, got)
		requireNoJob(t, r)
	})
}

func TestOrderByReadyTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld,
			Backoff: func(int) time.Duration { return 3 * time.Second }})
		// Enqueue order X, F, S, Z, Y, P; ready order Z, X, S, F, Y (P by priority).
		require.NoError(t, r.Enqueue("X", ""))
		lx := acquire(t, r, "w") // expires at t0+10s: X is ready at that instant
		require.Equal(t, "X", lx.JobID)
		require.NoError(t, r.Enqueue("F", ""))
		lf := acquire(t, r, "w")
		require.Equal(t, "F", lf.JobID)
		require.NoError(t, r.Enqueue("S", "", leaserouter.WithDelay(11*time.Second))) // ready t0+11s
		sleep(8 * time.Second)
		require.NoError(t, r.Enqueue("Z", "")) // ready t0+8s
		sleep(time.Second)
		require.NoError(t, lf.Fail(errors.New("retry"))) // ready t0+12s
		sleep(4 * time.Second)
		require.NoError(t, r.Enqueue("Y", "")) // ready t0+13s
		sleep(time.Second)
		require.NoError(t, r.Enqueue("P", "", leaserouter.WithPriority(1))) // t0+14s, higher priority
		sleep(time.Second)

		var got []string
		for range 6 {
			l := acquire(t, r, "w")
			got = append(got, l.JobID)
			require.NoError(t, l.Complete())
		}
		require.Equal(t, []string{"P", "Z", "X", "S", "F", "Y"}, got)
	})
}

func TestOrderReleasedJobReadyAtTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		la := acquire(t, r, "w")
		sleep(time.Second)
		require.NoError(t, r.Enqueue("b", ""))
		sleep(time.Second)
		require.NoError(t, la.Release()) // a is ready at t0+2s, after b (t0+1s)
		require.Equal(t, "b", acquire(t, r, "w").JobID)
		l := acquire(t, r, "w")
		require.Equal(t, "a", l.JobID)
		require.Equal(t, 2, l.Attempt)
	})
}

// ---------------------------------------------------------------------------
// No hidden timing

func TestNoHiddenTimingScheduledJob(t *testing.T) {
	for _, settle := range []bool{true, false} {
		t.Run(fmt.Sprintf("wait=%v", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				step := func(d time.Duration) {
					time.Sleep(d)
					if settle {
						synctest.Wait()
					}
				}
				r := setup(t, leaserouter.Options{LeaseDuration: time.Hour})
				t0 := time.Now()
				require.NoError(t, r.Enqueue("delay", "", leaserouter.WithDelay(10*time.Second)))
				require.NoError(t, r.Enqueue("runat", "", leaserouter.WithRunAt(t0.Add(20*time.Second))))
				require.NoError(t, r.Enqueue("get", "", leaserouter.WithDelay(30*time.Second)))

				step(10*time.Second - time.Nanosecond)
				requireNoJob(t, r)
				require.Equal(t, leaserouter.StateScheduled, get(t, r, "delay").State)
				step(time.Nanosecond)
				l := acquire(t, r, "w")
				require.Equal(t, "delay", l.JobID)

				step(10*time.Second - time.Nanosecond)
				requireNoJob(t, r)
				step(time.Nanosecond)
				l = acquire(t, r, "w")
				require.Equal(t, "runat", l.JobID)

				step(10*time.Second - time.Nanosecond)
				require.Equal(t, leaserouter.StateScheduled, get(t, r, "get").State)
				require.Equal(t, 1, r.Stats().Scheduled)
				step(time.Nanosecond)
				require.Equal(t, leaserouter.StatePending, get(t, r, "get").State, "Get settles the run-at")
				require.Equal(t, 0, r.Stats().Scheduled)
			})
		})
	}
}

func TestNoHiddenTimingLeaseExpiry(t *testing.T) {
	for _, settle := range []bool{true, false} {
		t.Run(fmt.Sprintf("wait=%v", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				step := func(d time.Duration) {
					time.Sleep(d)
					if settle {
						synctest.Wait()
					}
				}
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				for _, id := range []string{"a", "b", "c"} {
					require.NoError(t, r.Enqueue(id, ""))
				}
				t0 := time.Now()
				la, lb, lc := acquire(t, r, "wa"), acquire(t, r, "wb"), acquire(t, r, "wc")

				step(ld - time.Nanosecond)
				require.NoError(t, la.Heartbeat(nil), "valid at expiry-1ns")
				require.NoError(t, lb.Complete(), "valid at expiry-1ns")
				require.Equal(t, leaserouter.StateLeased, get(t, r, "c").State)

				step(time.Nanosecond)
				lle := requireLost(t, lc.Complete(), lc.Token, lc.Token)
				require.Equal(t, "c", lle.JobID)
				j := get(t, r, "c")
				require.Equal(t, leaserouter.StatePending, j.State, "lost at exactly its expiry")
				require.Equal(t, 1, j.Attempt)
				require.Empty(t, j.Owner)
				require.True(t, j.LeaseExpiry.IsZero())
				st := r.Stats()
				require.Equal(t, uint64(1), st.Expirations)
				require.Equal(t, uint64(1), st.StaleRejections)

				// a was extended at t0+ld-1ns to t0+2ld-1ns.
				requireTime(t, t0.Add(2*ld-time.Nanosecond), la.Expiry(), "")
				step(ld - 2*time.Nanosecond)
				j = get(t, r, "a")
				require.Equal(t, leaserouter.StateLeased, j.State)
				requireTime(t, t0.Add(2*ld-time.Nanosecond), j.LeaseExpiry, "")
				step(time.Nanosecond)
				requireLost(t, la.Heartbeat(nil), la.Token, la.Token)
				require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
				require.Equal(t, uint64(2), r.Stats().Expirations)
			})
		})
	}
}

// A refused operation on an expired lease treats the job exactly as the
// reaper would: here, with no attempts left, the job is dead.
func TestExpiredLeaseOperationSettlesLikeReaper(t *testing.T) {
	for _, settle := range []bool{true, false} {
		t.Run(fmt.Sprintf("wait=%v", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{LeaseDuration: ld, MaxAttempts: 1, OnEvent: rec.record})
				require.NoError(t, r.Enqueue("a", ""))
				t0 := time.Now()
				l := acquire(t, r, "w")
				time.Sleep(ld)
				if settle {
					synctest.Wait()
				}
				requireLost(t, l.Fail(errors.New("late")), l.Token, l.Token)
				j := get(t, r, "a")
				require.Equal(t, leaserouter.StateFailed, j.State)
				require.NotEqual(t, "late", j.LastError, "the refused Fail changed nothing")
				require.NotEmpty(t, j.LastError, "expiry is recorded as the failure")
				st := r.Stats()
				require.Equal(t, uint64(1), st.Dead)
				require.Equal(t, uint64(1), st.Expirations)
				require.Equal(t, uint64(0), st.Retries)

				synctest.Wait()
				require.Equal(t, []string{"enqueued", "lease_acquired", "lease_expired", "dead", "stale_rejected"},
					rec.kinds("a"))
				requireTime(t, t0.Add(ld), rec.of("a")[2].Time, "lease_expired Time is the expiry instant")
			})
		})
	}
}

// ---------------------------------------------------------------------------
// Leases

func TestHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		t0 := time.Now()
		l := acquire(t, r, "w1")
		tok := l.Token
		require.Nil(t, l.Progress, "no checkpoint on a first lease")

		sleep(4 * time.Second)
		p := []byte("step-1")
		require.NoError(t, l.Heartbeat(p))
		p[0] = 'X' // the router stored a copy
		require.Equal(t, tok, l.Token, "Heartbeat never changes the token")
		requireTime(t, t0.Add(4*time.Second+ld), l.Expiry(), "extended to now+LeaseDuration")
		j := get(t, r, "a")
		require.Equal(t, tok, j.Token)
		requireTime(t, t0.Add(4*time.Second+ld), j.LeaseExpiry, "")
		require.Equal(t, "step-1", string(j.Progress))
		require.Equal(t, "w1", j.Owner)
		require.Equal(t, uint64(1), r.Stats().Heartbeats)

		sleep(time.Second)
		require.NoError(t, l.Heartbeat(nil))
		require.Equal(t, "step-1", string(get(t, r, "a").Progress), "nil progress keeps the last")
		requireTime(t, t0.Add(5*time.Second+ld), l.Expiry(), "")
		require.Equal(t, uint64(2), r.Stats().Heartbeats)

		sleep(ld - time.Nanosecond)
		require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State)
		sleep(time.Nanosecond)
		requireLost(t, l.Heartbeat([]byte("too late")), tok, tok)
		j = get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State, "a refused heartbeat does not revive the lease")
		require.Equal(t, "step-1", string(j.Progress), "a refused heartbeat stores nothing")
		st := r.Stats()
		require.Equal(t, uint64(2), st.Heartbeats, "refused heartbeats are not counted as heartbeats")
		require.Equal(t, uint64(1), st.StaleRejections)

		l2 := acquire(t, r, "w2")
		require.Equal(t, "step-1", string(l2.Progress), "the next lease carries the checkpoint")
		require.Equal(t, 2, l2.Attempt)
		require.Greater(t, l2.Token, tok)

		ext := rec.ofKind(leaserouter.EventLeaseExtended)
		require.Len(t, ext, 2)
		for _, e := range ext {
			require.Equal(t, tok, e.Token)
			require.Equal(t, "w1", e.WorkerID)
			require.Equal(t, 1, e.Attempt)
		}
	})
}

func TestGetReturnsACopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", "payload"))
		l := acquire(t, r, "w")
		require.NoError(t, l.Heartbeat([]byte("abc")))

		j := get(t, r, "a")
		j.Progress[0] = 'X'
		j.State = leaserouter.StateFailed
		j.Owner = "thief"
		j = get(t, r, "a")
		require.Equal(t, "abc", string(j.Progress))
		require.Equal(t, leaserouter.StateLeased, j.State)
		require.Equal(t, "w", j.Owner)

		require.NoError(t, l.Release())
		l2 := acquire(t, r, "w")
		l2.Progress[0] = 'Y' // the lease's checkpoint is a copy too
		require.Equal(t, "abc", string(get(t, r, "a").Progress))
		got := get(t, r, "a").Progress
		require.NoError(t, l2.Heartbeat([]byte("xyz")))
		require.Equal(t, "abc", string(got), "a returned Progress never aliases the router's buffer")
		require.Equal(t, "xyz", string(get(t, r, "a").Progress))
	})
}

func TestComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		sleep(time.Second)
		require.NoError(t, l.Complete())

		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateSucceeded, j.State)
		require.Empty(t, j.Owner)
		require.True(t, j.LeaseExpiry.IsZero())
		require.Equal(t, l.Token, j.Token)
		require.Equal(t, 1, j.Attempt)
		st := r.Stats()
		require.Equal(t, 1, st.Succeeded)
		require.Equal(t, 0, st.Leased)

		// Every operation on the ended lease is refused and changes nothing else.
		ops := []func() error{
			l.Complete,
			func() error { return l.Heartbeat([]byte("x")) },
			func() error { return l.Fail(errors.New("x")) },
			l.Release,
		}
		for i, op := range ops {
			lle := requireLost(t, op(), l.Token, l.Token)
			require.Equal(t, leaserouter.LostCompleted, lle.Reason)
			require.Equal(t, j, get(t, r, "a"))
			st.StaleRejections++
			if i == 1 { // the heartbeat
				st.HeartbeatsRefused++
			}
			require.Equal(t, st, r.Stats(), "op %d", i)
		}
		requireNoJob(t, r)
		synctest.Wait()
		require.Equal(t, []string{"enqueued", "lease_acquired", "completed",
			"stale_rejected", "stale_rejected", "stale_rejected", "stale_rejected"}, rec.kinds("a"))
	})
}

func TestStaleOperationsRefused(t *testing.T) {
	ops := []struct {
		name string
		op   func(*lease) error
	}{
		{"Heartbeat", func(l *lease) error { return l.Heartbeat([]byte("stale")) }},
		{"HeartbeatNil", func(l *lease) error { return l.Heartbeat(nil) }},
		{"Complete", (*lease).Complete},
		{"Fail", func(l *lease) error { return l.Fail(errors.New("stale")) }},
		{"FailPermanent", func(l *lease) error { return l.Fail(leaserouter.Permanent(errors.New("stale"))) }},
		{"Release", (*lease).Release},
	}
	for _, tt := range ops {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: noBackoff, OnEvent: rec.record})
				require.NoError(t, r.Enqueue("a", ""))
				old := acquire(t, r, "w1")
				require.NoError(t, old.Heartbeat([]byte("old")))
				sleep(ld)
				cur := acquire(t, r, "w2")
				require.NoError(t, cur.Heartbeat([]byte("cur")))
				require.Greater(t, cur.Token, old.Token)
				before, stats := get(t, r, "a"), r.Stats()

				err := tt.op(old)
				lle := requireLost(t, err, old.Token, cur.Token)
				require.Equal(t, "a", lle.JobID)
				// The job has a newer lease: whatever ended this one, it is
				// superseded.
				require.Equal(t, leaserouter.LostSuperseded, lle.Reason)
				require.Equal(t, before, get(t, r, "a"), "a refused operation changes nothing")
				stats.StaleRejections++
				if strings.HasPrefix(tt.name, "Heartbeat") {
					stats.HeartbeatsRefused++
				}
				require.Equal(t, stats, r.Stats())

				synctest.Wait()
				e := rec.last(t, "a")
				require.Equal(t, leaserouter.EventStaleRejected, e.Kind)
				require.Equal(t, old.Token, e.Token, "stale_rejected carries the refused token")
				require.ErrorIs(t, e.Err, leaserouter.ErrLeaseLost)
				var eLLE *leaserouter.LeaseLostError
				require.ErrorAs(t, e.Err, &eLLE)
				require.Equal(t, old.Token, eLLE.Token)

				require.NoError(t, cur.Complete(), "the current lease is undisturbed")
			})
		})
	}
}

// asLeaseLostValue calls errors.As with a LeaseLostError value target,
// reporting a panic instead of crashing the test binary. The target goes
// through an any so that vet's errorsas check does not reject the call.
func asLeaseLostValue(err error) (v leaserouter.LeaseLostError, ok bool, panicked any) {
	defer func() { panicked = recover() }()
	var target any = &v
	ok = errors.As(err, target)
	return v, ok, nil
}

func asStaleTokenValue(err error) (v leaserouter.StaleTokenError, ok bool, panicked any) {
	defer func() { panicked = recover() }()
	var target any = &v
	ok = errors.As(err, target)
	return v, ok, nil
}

// The brief: errors.As works with a *LeaseLostError target and also with a
// LeaseLostError value target.
func TestLeaseLostErrorAsValueTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NoError(t, l.Release())
		err := l.Complete()
		lle := requireLost(t, err, l.Token, l.Token)
		require.Equal(t, leaserouter.LostReleased, lle.Reason)

		v, ok, panicked := asLeaseLostValue(err)
		require.Nil(t, panicked, "errors.As with a LeaseLostError value target panicked")
		require.True(t, ok)
		require.Equal(t, *lle, v)
	})
}

func TestNilLease(t *testing.T) {
	var l *lease
	// Each refusal is a value of its own: editing one changes no other.
	var first *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(), &first)
	first.Reason, first.JobID = "edited", "edited"
	var second *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(), &second)
	require.Equal(t, leaserouter.LostNilLease, second.Reason)
	require.Empty(t, second.JobID)

	require.ErrorIs(t, l.Heartbeat(nil), leaserouter.ErrLeaseLost)
	require.ErrorIs(t, l.Complete(), leaserouter.ErrLeaseLost)
	require.ErrorIs(t, l.Fail(nil), leaserouter.ErrLeaseLost)
	require.ErrorIs(t, l.Release(), leaserouter.ErrLeaseLost)
	require.True(t, l.Expiry().IsZero())
}

// ---------------------------------------------------------------------------
// Attempts

func TestExpiryMakesJobPendingAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		t0 := time.Now()
		l := acquire(t, r, "w1")

		sleep(ld)
		// The reaper made the expiry visible without any call into the Router.
		e := rec.last(t, "a")
		require.Equal(t, leaserouter.EventLeaseExpired, e.Kind)
		requireTime(t, t0.Add(ld), e.Time, "lease_expired Time is the expiry instant")
		require.Equal(t, "w1", e.WorkerID, "the former owner")
		require.Equal(t, l.Token, e.Token)
		require.Equal(t, 1, e.Attempt)

		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Empty(t, j.Owner)
		require.NotEmpty(t, j.LastError, "an expiry is a failure")
		st := r.Stats()
		require.Equal(t, uint64(1), st.Expirations)
		require.Equal(t, 1, st.Pending)
		require.Equal(t, 0, st.Leased)

		l2 := acquire(t, r, "w2")
		require.Equal(t, 2, l2.Attempt)
	})
}

func TestFailSchedulesAfterBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var calls []int
		backoff := func(attempt int) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, attempt)
			return time.Duration(attempt) * 10 * time.Second
		}
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: time.Minute, MaxAttempts: 3, Backoff: backoff,
			Retention: 2 * time.Hour, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))

		l1 := acquire(t, r, "w")
		t1 := time.Now()
		require.NoError(t, l1.Fail(errors.New("boom 1")))
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateScheduled, j.State)
		requireTime(t, t1.Add(10*time.Second), j.RunAt, "Backoff(1)")
		require.Equal(t, "boom 1", j.LastError)
		require.Equal(t, 1, j.Attempt)
		require.Empty(t, j.Owner)
		st := r.Stats()
		require.Equal(t, uint64(1), st.Retries)
		require.Equal(t, 1, st.Scheduled)

		sleep(10*time.Second - time.Nanosecond)
		requireNoJob(t, r)
		sleep(time.Nanosecond)
		l2 := acquire(t, r, "w")
		require.Equal(t, 2, l2.Attempt)
		t2 := time.Now()
		require.NoError(t, l2.Fail(errors.New("boom 2")))
		requireTime(t, t2.Add(20*time.Second), get(t, r, "a").RunAt, "Backoff(2)")

		sleep(20 * time.Second)
		l3 := acquire(t, r, "w")
		require.Equal(t, 3, l3.Attempt)
		require.NoError(t, l3.Fail(errors.New("boom 3")))
		j = get(t, r, "a")
		require.Equal(t, leaserouter.StateFailed, j.State, "dead after MaxAttempts")
		require.Equal(t, "boom 3", j.LastError)
		st = r.Stats()
		require.Equal(t, uint64(1), st.Dead)
		require.Equal(t, 1, st.Failed)
		require.Equal(t, uint64(2), st.Retries)
		mu.Lock()
		require.GreaterOrEqual(t, len(calls), 2)
		require.Equal(t, []int{1, 2}, calls[:2])
		mu.Unlock()

		sleep(time.Hour)
		requireNoJob(t, r)
		require.Equal(t, leaserouter.StateFailed, get(t, r, "a").State)

		require.Equal(t, []string{"enqueued",
			"lease_acquired", "failed", "retry_scheduled",
			"lease_acquired", "failed", "retry_scheduled",
			"lease_acquired", "failed", "dead"}, rec.kinds("a"))
		evs := rec.of("a")
		require.EqualError(t, evs[2].Err, "boom 1")
		require.EqualError(t, evs[8].Err, "boom 3")
		require.ErrorContains(t, evs[9].Err, "boom 3", "dead carries the last error")
	})
}

func TestFailWithNonPositiveBackoffRetriesAtOnce(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		t.Run(d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{Backoff: func(int) time.Duration { return d }, OnEvent: rec.record})
				require.NoError(t, r.Enqueue("a", ""))
				l := acquire(t, r, "w")
				require.NoError(t, l.Fail(errors.New("boom")))
				require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
				l2 := acquire(t, r, "w")
				require.Equal(t, 2, l2.Attempt)
				synctest.Wait()
				require.Equal(t, []string{"enqueued", "lease_acquired", "failed", "retry_scheduled", "lease_acquired"},
					rec.kinds("a"))
			})
		})
	}
}

func TestRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w1")
		require.NoError(t, l.Release())
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State, "pending at once")
		require.Equal(t, 1, j.Attempt, "the attempt counts")
		require.Empty(t, j.Owner)
		require.True(t, j.LeaseExpiry.IsZero())
		lle := requireLost(t, l.Release(), l.Token, l.Token)
		require.Equal(t, leaserouter.LostReleased, lle.Reason)

		l2 := acquire(t, r, "w2")
		require.Equal(t, 2, l2.Attempt)
		synctest.Wait()
		rel := rec.ofKind(leaserouter.EventReleased)
		require.Len(t, rel, 1)
		require.Equal(t, l.Token, rel[0].Token)
		require.Equal(t, "w1", rel[0].WorkerID)
		require.Equal(t, 1, rel[0].Attempt)
	})
}

func TestAttemptsExhaustedByExpiryOrRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, MaxAttempts: 1, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("expire", ""))
		require.NoError(t, r.Enqueue("release", ""))
		acquire(t, r, "w")
		lr := acquire(t, r, "w")
		require.NoError(t, lr.Release())
		require.Equal(t, leaserouter.StateFailed, get(t, r, "release").State)
		sleep(ld)
		require.Equal(t, leaserouter.StateFailed, get(t, r, "expire").State)
		st := r.Stats()
		require.Equal(t, uint64(2), st.Dead)
		require.Equal(t, 2, st.Failed)
		requireNoJob(t, r)
		require.Equal(t, []string{"enqueued", "lease_acquired", "released", "dead"}, rec.kinds("release"))
		require.Equal(t, []string{"enqueued", "lease_acquired", "lease_expired", "dead"}, rec.kinds("expire"))
	})
}

func TestWithMaxAttemptsOverrides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{MaxAttempts: 1, Backoff: noBackoff})
		require.NoError(t, r.Enqueue("three", "", leaserouter.WithMaxAttempts(3)))
		require.Equal(t, 3, get(t, r, "three").MaxAttempts)
		for attempt := 1; attempt <= 3; attempt++ {
			l := acquire(t, r, "w")
			require.Equal(t, attempt, l.Attempt)
			require.NoError(t, l.Fail(errors.New("boom")))
		}
		require.Equal(t, leaserouter.StateFailed, get(t, r, "three").State)

		r2 := setup(t, leaserouter.Options{MaxAttempts: 5, Backoff: noBackoff})
		require.NoError(t, r2.Enqueue("one", "", leaserouter.WithMaxAttempts(1)))
		require.NoError(t, acquire(t, r2, "w").Fail(errors.New("boom")))
		require.Equal(t, leaserouter.StateFailed, get(t, r2, "one").State)
	})
}

func TestPermanent(t *testing.T) {
	require.NoError(t, leaserouter.Permanent(nil))
	base := errors.New("bad input")
	perm := leaserouter.Permanent(base)
	require.ErrorIs(t, perm, base)
	require.Equal(t, base.Error(), perm.Error())

	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{MaxAttempts: 5, Backoff: noBackoff, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, r.Enqueue("wrapped", ""))

		require.NoError(t, acquire(t, r, "w").Fail(perm))
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateFailed, j.State, "no retry for a permanent error")
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "bad input", j.LastError)

		require.NoError(t, acquire(t, r, "w").Fail(fmt.Errorf("parse: %w", perm)))
		j = get(t, r, "wrapped")
		require.Equal(t, leaserouter.StateFailed, j.State, "a wrapped permanent error fails at once too")
		require.Equal(t, "parse: bad input", j.LastError)

		st := r.Stats()
		require.Equal(t, uint64(2), st.Dead)
		require.Equal(t, uint64(0), st.Retries)
		synctest.Wait()
		require.Equal(t, []string{"enqueued", "lease_acquired", "failed", "dead"}, rec.kinds("a"))
	})
}

func TestFailNilAndLastErrorKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{Backoff: noBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, acquire(t, r, "w").Fail(nil))
		j := get(t, r, "a")
		require.Equal(t, "unknown error", j.LastError)
		require.Equal(t, leaserouter.StatePending, j.State, "Fail(nil) is a failure with a retry")

		l := acquire(t, r, "w")
		require.NoError(t, l.Fail(errors.New("boom")))
		require.NoError(t, acquire(t, r, "w").Complete())
		j = get(t, r, "a")
		require.Equal(t, leaserouter.StateSucceeded, j.State)
		require.Equal(t, "boom", j.LastError, "kept after a later success")
		require.Equal(t, 3, j.Attempt)
	})
}

// ---------------------------------------------------------------------------
// Tokens

func TestTokensStrictlyIncreasing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wallAtNew := time.Now().UnixNano()
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: noBackoff})
		for _, id := range []string{"a", "b", "c"} {
			require.NoError(t, r.Enqueue(id, ""))
		}
		var prev leaserouter.Token
		check := func(l *lease) {
			t.Helper()
			require.Greater(t, l.Token, prev)
			require.Greater(t, uint64(l.Token), uint64(wallAtNew))
			require.LessOrEqual(t, uint64(l.Token), uint64(math.MaxInt64))
			require.Equal(t, l.Token, get(t, r, l.JobID).Token)
			prev = l.Token
		}
		for range 3 {
			la := acquire(t, r, "w")
			check(la)
			lb := acquire(t, r, "w")
			check(lb)
			require.NoError(t, la.Fail(errors.New("x")))
			require.NoError(t, lb.Release())
		}
		l := acquire(t, r, "w")
		check(l)
		sleep(ld)
		l = acquire(t, r, "w")
		check(l)
		require.NoError(t, l.Complete())
	})
}

func TestTokensAboveWallClockAtNew(t *testing.T) {
	// Outside a bubble: the real wall clock.
	for _, floor := range []leaserouter.Token{0, 42} {
		before := time.Now().UnixNano()
		r := setup(t, leaserouter.Options{TokenFloor: floor})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NoError(t, l.Complete()) // first, so a failure below leaves no lease for Close to drain
		require.Greater(t, uint64(l.Token), uint64(before), "first token above the wall clock at New")
		require.LessOrEqual(t, uint64(l.Token), uint64(math.MaxInt64))
	}
}

func TestTokenFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		floor := leaserouter.Token(math.MaxInt64 - 1000)
		r := setup(t, leaserouter.Options{TokenFloor: floor, Backoff: noBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		prev := floor
		for range 3 {
			l := acquire(t, r, "w")
			require.Greater(t, l.Token, prev)
			require.LessOrEqual(t, uint64(l.Token), uint64(math.MaxInt64), "fits in an int64")
			prev = l.Token
			require.NoError(t, l.Release())
		}
	})
}

func TestTokensExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{TokenFloor: math.MaxInt64 - 1})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, r.Enqueue("b", ""))
		l := acquire(t, r, "w")
		require.Equal(t, leaserouter.Token(math.MaxInt64), l.Token, "the only token above the floor")
		require.NoError(t, l.Complete())

		l, err := r.TryAcquire("w")
		require.ErrorIs(t, err, leaserouter.ErrTokensExhausted)
		require.Nil(t, l)
		j := get(t, r, "b")
		require.Equal(t, leaserouter.StatePending, j.State, "no job is lost")
		require.Equal(t, 0, j.Attempt)
		require.Equal(t, uint64(1), r.Stats().LeasesGranted)
	})
}

// ---------------------------------------------------------------------------
// Cancel

func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: hourBackoff, OnEvent: rec.record})
		for _, id := range []string{"leased", "pending", "done", "dead"} {
			require.NoError(t, r.Enqueue(id, ""))
		}
		require.NoError(t, r.Enqueue("scheduled", "", leaserouter.WithDelay(time.Hour)))
		ll := acquire(t, r, "w")
		require.Equal(t, "leased", ll.JobID)
		require.NoError(t, r.Cancel("pending"))
		require.NoError(t, acquire(t, r, "w").Complete())
		require.NoError(t, acquire(t, r, "w").Fail(leaserouter.Permanent(errors.New("bad"))))

		require.NoError(t, r.Cancel("scheduled"))
		require.NoError(t, r.Cancel("leased"))
		for _, id := range []string{"pending", "scheduled", "leased"} {
			j := get(t, r, id)
			require.Equal(t, leaserouter.StateCanceled, j.State, id)
			require.Empty(t, j.Owner)
			require.True(t, j.LeaseExpiry.IsZero())
		}
		// The leased job's lease is lost at once.
		lle := requireLost(t, ll.Heartbeat(nil), ll.Token, ll.Token)
		require.Equal(t, leaserouter.LostCanceled, lle.Reason)
		requireLost(t, ll.Complete(), ll.Token, ll.Token)
		require.Equal(t, leaserouter.StateCanceled, get(t, r, "leased").State)

		// Finished jobs: nil, nothing changes, no event.
		synctest.Wait()
		nEvents := len(rec.all())
		for _, id := range []string{"done", "dead", "pending"} {
			before := get(t, r, id)
			require.NoError(t, r.Cancel(id))
			require.Equal(t, before, get(t, r, id))
		}
		synctest.Wait()
		require.Len(t, rec.all(), nEvents)

		require.ErrorIs(t, r.Cancel("unknown"), leaserouter.ErrNotFound)
		err := r.Cancel("")
		require.ErrorIs(t, err, leaserouter.ErrNotFound)
		require.ErrorIs(t, err, leaserouter.ErrInvalidJob)

		st := r.Stats()
		require.Equal(t, 3, st.Canceled)
		require.Equal(t, 0, st.Pending+st.Scheduled+st.Leased)
		sleep(2 * time.Hour)
		requireNoJob(t, r)

		canceled := rec.ofKind(leaserouter.EventCanceled)
		require.Len(t, canceled, 3)
		for _, e := range canceled {
			if e.JobID == "leased" {
				require.Equal(t, ll.Token, e.Token, "canceled carries the lost lease")
				require.Equal(t, "w", e.WorkerID)
			} else {
				require.Zero(t, e.Token, e.JobID)
			}
		}
	})
}

// TestCancelAfterExpiryCarriesLatestToken: a job whose lease expired is
// pending when canceled, and its canceled event (like a duplicate Enqueue's)
// carries the expired lease's token: no event of the job after
// lease_acquired carries an older one. (Before, they carried 0.)
func TestCancelAfterExpiryCarriesLatestToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		sleep(ld)
		require.ErrorIs(t, r.Enqueue("a", ""), leaserouter.ErrDuplicate)
		require.NoError(t, r.Cancel("a"))
		synctest.Wait()
		require.Equal(t, []string{"enqueued", "lease_acquired", "lease_expired", "duplicate", "canceled"}, rec.kinds("a"))
		for _, e := range rec.of("a")[1:] {
			require.Equal(t, l.Token, e.Token, "%v", e.Kind)
		}
	})
}

// ---------------------------------------------------------------------------
// Acquire

func TestAcquireWokenByEnqueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		ch := goAcquire(context.Background(), r, "w")
		sleep(time.Hour)
		requireBlocked(t, ch)
		require.NoError(t, r.Enqueue("a", "x"))
		synctest.Wait()
		res := receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, "a", res.l.JobID)
		require.Equal(t, "x", res.l.Payload)
		require.Equal(t, "w", res.l.WorkerID)
		require.Equal(t, 1, res.l.Attempt)
	})
}

func TestAcquireWokenByRunAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("late", "", leaserouter.WithDelay(time.Hour)))
		ch := goAcquire(context.Background(), r, "w")
		synctest.Wait()
		// An earlier deadline re-arms the reaper.
		require.NoError(t, r.Enqueue("soon", "", leaserouter.WithDelay(10*time.Second)))
		sleep(10*time.Second - time.Nanosecond)
		requireBlocked(t, ch)
		sleep(time.Nanosecond)
		res := receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, "soon", res.l.JobID)
	})
}

func TestAcquireWokenByLeaseExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l1 := acquire(t, r, "w1")
		ch := goAcquire(context.Background(), r, "w2")
		sleep(ld - time.Nanosecond)
		requireBlocked(t, ch)
		sleep(time.Nanosecond)
		res := receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, "a", res.l.JobID)
		require.Equal(t, 2, res.l.Attempt)
		require.Greater(t, res.l.Token, l1.Token)
	})
}

func TestAcquireWokenByReleaseAndFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: noBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		l1 := acquire(t, r, "w1")
		ch := goAcquire(context.Background(), r, "w2")
		synctest.Wait()
		requireBlocked(t, ch)
		require.NoError(t, l1.Release())
		synctest.Wait()
		res := receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, 2, res.l.Attempt)

		ch = goAcquire(context.Background(), r, "w3")
		synctest.Wait()
		requireBlocked(t, ch)
		require.NoError(t, res.l.Fail(errors.New("boom"))) // zero backoff: ready at once
		synctest.Wait()
		res = receive(t, ch)
		require.NoError(t, res.err)
		require.Equal(t, 3, res.l.Attempt)
	})
}

func TestAcquireContextCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		canceled := goAcquire(ctx, r, "gone")
		live := goAcquire(context.Background(), r, "live")
		synctest.Wait()
		cancel()
		synctest.Wait()
		res := receive(t, canceled)
		require.ErrorIs(t, res.err, context.Canceled)
		require.Nil(t, res.l)
		requireBlocked(t, live)

		// The canceled waiter takes no job and swallows no wake-up.
		require.NoError(t, r.Enqueue("a", ""))
		synctest.Wait()
		res = receive(t, live)
		require.NoError(t, res.err)
		require.Equal(t, "a", res.l.JobID)
		require.Equal(t, uint64(1), r.Stats().LeasesGranted)
	})
}

// flipCtx is a context whose Err is nil for its first n calls and
// context.Canceled after, while Done never closes: it is canceled at an
// exact step of Acquire.
type flipCtx struct {
	context.Context
	mu    sync.Mutex
	calls int
	n     int
}

func (c *flipCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.calls > c.n {
		return context.Canceled
	}
	return nil
}

// TestAcquireWokenWithCtxCanceledPassesWakeOn: a waiter woken for a job
// whose ctx is canceled at any step after the wake-up either takes the job
// or passes the wake-up on; the next waiter never sleeps beside a ready
// job. (Before, a ctx canceled between the post-wake check and the next
// check, n = 2, returned without passing it on.)
func TestAcquireWokenWithCtxCanceledPassesWakeOn(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprint("Err nil for ", n, " calls"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{})
				first := goAcquire(&flipCtx{Context: context.Background(), n: n}, r, "first")
				synctest.Wait()
				second := goAcquire(context.Background(), r, "second")
				synctest.Wait()
				require.NoError(t, r.Enqueue("a", ""))
				synctest.Wait()
				res := receive(t, first)
				if res.err == nil {
					require.Equal(t, "a", res.l.JobID)
					requireBlocked(t, second)
					return
				}
				require.ErrorIs(t, res.err, context.Canceled)
				got := receive(t, second)
				require.NoError(t, got.err, "the wake-up was passed on")
				require.Equal(t, "a", got.l.JobID)
			})
		})
	}
}

func TestAcquireDeadlineExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ch := goAcquire(ctx, r, "w")
		sleep(10*time.Second - time.Nanosecond)
		requireBlocked(t, ch)
		sleep(time.Nanosecond)
		res := receive(t, ch)
		require.ErrorIs(t, res.err, context.DeadlineExceeded)
		require.Nil(t, res.l)
		require.Equal(t, leaserouter.Stats{}, r.Stats())
	})
}

// A job becoming ready at the very instant of the deadline is either handed
// out or left pending; it is never taken and dropped.
func TestAcquireDeadlineSwallowsNoJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", "", leaserouter.WithDelay(10*time.Second)))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ch := goAcquire(ctx, r, "w")
		sleep(10 * time.Second)
		res := receive(t, ch)
		j := get(t, r, "a")
		if res.err != nil {
			require.ErrorIs(t, res.err, context.DeadlineExceeded)
			require.Nil(t, res.l)
			require.Equal(t, leaserouter.StatePending, j.State)
			require.Equal(t, 0, j.Attempt)
			require.Equal(t, uint64(0), r.Stats().LeasesGranted)
			require.Equal(t, "a", acquire(t, r, "w2").JobID)
		} else {
			require.Equal(t, leaserouter.StateLeased, j.State)
			require.Equal(t, res.l.Token, j.Token)
			require.Equal(t, uint64(1), r.Stats().LeasesGranted)
		}

		// A ctx already done with a job ready: ctx.Err() and nothing taken, or the job.
		require.NoError(t, r.Enqueue("b", ""))
		done, cancelDone := context.WithCancel(context.Background())
		cancelDone()
		before := r.Stats().LeasesGranted
		l, err := r.Acquire(done, "w")
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, before, r.Stats().LeasesGranted)
			require.Equal(t, leaserouter.StatePending, get(t, r, "b").State)
		} else {
			require.Equal(t, l.Token, get(t, r, l.JobID).Token)
		}
	})
}

func TestAcquireNilContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		var nilCtx context.Context
		l, err := r.Acquire(nilCtx, "w")
		require.NoError(t, err)
		require.Equal(t, "a", l.JobID)
	})
}

func TestCloseWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		a, b := goAcquire(context.Background(), r, "a"), goAcquire(context.Background(), r, "b")
		synctest.Wait()
		requireBlocked(t, a)
		require.NoError(t, r.Close(context.Background()))
		synctest.Wait()
		for _, ch := range []<-chan result{a, b} {
			res := receive(t, ch)
			require.ErrorIs(t, res.err, leaserouter.ErrClosed)
			require.Nil(t, res.l)
		}
	})
}

// ---------------------------------------------------------------------------
// Events

func TestEventsTellTheWholeStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Retention: -1, OnEvent: rec.record,
			Backoff: func(int) time.Duration { return 5 * time.Second }})
		t0 := time.Now()
		boom := errors.New("boom")
		require.NoError(t, r.Enqueue("a", ""))
		l1 := acquire(t, r, "w1")
		sleep(time.Second)
		require.NoError(t, l1.Heartbeat(nil))
		require.NoError(t, l1.Fail(boom)) // t0+1s, ready t0+6s
		sleep(5 * time.Second)
		l2 := acquire(t, r, "w2")
		require.NoError(t, l2.Release())
		l3 := acquire(t, r, "w3") // t0+6s, expires t0+16s
		sleep(ld)
		l4 := acquire(t, r, "w4")
		requireLost(t, l1.Complete(), l1.Token, l4.Token)
		require.NoError(t, l4.Complete())
		synctest.Wait()

		evs := rec.of("a")
		require.Equal(t, []string{"enqueued",
			"lease_acquired", "lease_extended", "failed", "retry_scheduled",
			"lease_acquired", "released",
			"lease_acquired", "lease_expired",
			"lease_acquired", "stale_rejected", "completed", "purged"}, kindNames(evs))

		type want struct {
			worker  string
			token   leaserouter.Token
			attempt int
			at      time.Duration
		}
		// failed and retry_scheduled promise no WorkerID or Token; the
		// token rule below still bounds theirs.
		loose := map[leaserouter.EventKind]bool{leaserouter.EventFailed: true,
			leaserouter.EventRetryScheduled: true, leaserouter.EventStaleRejected: true}
		wants := []want{
			{"", 0, 0, 0},
			{"w1", l1.Token, 1, 0}, {"w1", l1.Token, 1, time.Second}, {"w1", l1.Token, 1, time.Second}, {"w1", l1.Token, 1, time.Second},
			{"w2", l2.Token, 2, 6 * time.Second}, {"w2", l2.Token, 2, 6 * time.Second},
			{"w3", l3.Token, 3, 6 * time.Second}, {"w3", l3.Token, 3, 16 * time.Second},
			{"w4", l4.Token, 4, 16 * time.Second}, {"", l1.Token, 0, 16 * time.Second}, {"w4", l4.Token, 4, 16 * time.Second},
		}
		for i, w := range wants {
			e := evs[i]
			requireTime(t, t0.Add(w.at), e.Time, "event %d %v", i, e.Kind)
			if e.Kind == leaserouter.EventStaleRejected || !loose[e.Kind] {
				require.Equal(t, w.token, e.Token, "event %d %v", i, e.Kind)
			}
			if e.Kind != leaserouter.EventStaleRejected {
				require.Equal(t, w.attempt, e.Attempt, "event %d %v", i, e.Kind)
			}
			if !loose[e.Kind] {
				require.Equal(t, w.worker, e.WorkerID, "event %d %v", i, e.Kind)
			}
		}
		require.ErrorIs(t, evs[3].Err, boom, "failed carries the cause")
		require.ErrorIs(t, evs[10].Err, leaserouter.ErrLeaseLost, "stale_rejected carries the refusal")

		// After lease_acquired with token t, no event carries an older token
		// except stale_rejected.
		var latest leaserouter.Token
		for i, e := range evs {
			if e.Kind == leaserouter.EventLeaseAcquired {
				latest = e.Token
			}
			if e.Kind != leaserouter.EventStaleRejected && e.Token != 0 {
				require.GreaterOrEqual(t, e.Token, latest, "event %d %v", i, e.Kind)
			}
		}
		// Delivered in the order the transitions happened.
		all := rec.all()
		for i := 1; i < len(all); i++ {
			require.False(t, all[i].Time.Before(all[i-1].Time), "event %d %v before event %d", i, all[i].Kind, i-1)
		}
	})
}

func TestOnEventMayCallBackIntoRouter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			r    *router
			mu   sync.Mutex
			errs []error
			seen int
		)
		onEvent := func(e leaserouter.Event) {
			// Everything here would deadlock if called under the router's lock.
			_, _ = r.Get(e.JobID)
			_ = r.Stats()
			err := r.Audit()
			var enqErr error
			if e.Kind == leaserouter.EventCompleted && e.JobID == "a" {
				enqErr = r.Enqueue("follow-up", "")
			}
			mu.Lock()
			defer mu.Unlock()
			seen++
			errs = append(errs, err, enqErr)
		}
		r = setup(t, leaserouter.Options{OnEvent: onEvent})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, acquire(t, r, "w").Complete())
		synctest.Wait()
		require.Equal(t, leaserouter.StatePending, get(t, r, "follow-up").State)
		require.NoError(t, r.Close(context.Background()))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 4, seen, "enqueued, lease_acquired, completed, enqueued")
		require.NoError(t, errors.Join(errs...))
	})
}

func TestCloseDeliversEveryEventFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var delivered atomic.Int64
		slow := func(leaserouter.Event) {
			time.Sleep(time.Second) // a slow hook delays delivery, not transitions
			delivered.Add(1)
		}
		r := setup(t, leaserouter.Options{OnEvent: slow})
		for i := range 3 {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
			require.NoError(t, acquire(t, r, "w").Complete())
		}
		// Transitions made by other goroutines, their events still in delivery
		// (the hook is asleep) when Close is called.
		enqueued := make(chan error, 2)
		for _, id := range []string{"x", "y"} {
			go func() { enqueued <- r.Enqueue(id, "") }()
		}
		synctest.Wait()
		require.Less(t, delivered.Load(), int64(11))
		require.NoError(t, r.Close(context.Background()))
		require.Equal(t, int64(11), delivered.Load(), "every event delivered before Close returns")
		for range 2 {
			require.NoError(t, <-enqueued)
		}
	})
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func (h *logRecorder) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		out = append(out, r.Message)
	}
	return out
}

func TestLoggerOneRecordPerEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &logRecorder{}
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Logger: slog.New(h), OnEvent: rec.record,
			Backoff: noBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		require.ErrorIs(t, r.Enqueue("a", ""), leaserouter.ErrDuplicate)
		l := acquire(t, r, "w")
		require.NoError(t, l.Heartbeat(nil))
		require.NoError(t, l.Fail(errors.New("boom")))
		requireLost(t, l.Complete(), l.Token, l.Token)
		acquire(t, r, "w")
		sleep(ld)
		require.NoError(t, r.Close(context.Background()))

		msgs := h.messages()
		require.Equal(t, kindNames(rec.all()), msgs)
		require.Equal(t, []string{"enqueued", "duplicate", "lease_acquired", "lease_extended", "failed",
			"retry_scheduled", "stale_rejected", "lease_acquired", "lease_expired"}, msgs)

		// A record names its job.
		h.mu.Lock()
		defer h.mu.Unlock()
		found := false
		h.recs[0].Attrs(func(a slog.Attr) bool {
			found = found || a.Value.String() == "a"
			return !found
		})
		require.True(t, found, "the enqueued record carries the job ID")
	})
}

// ---------------------------------------------------------------------------
// Close

func TestCloseDrainsGrantedLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: hourBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, r.Enqueue("b", ""))
		la, lb := acquire(t, r, "w"), acquire(t, r, "w")

		closed := goClose(context.Background(), r)
		synctest.Wait()
		requireBlocked(t, closed)
		require.ErrorIs(t, r.Enqueue("c", ""), leaserouter.ErrClosed, "new work refused at once")
		_, err := r.TryAcquire("w")
		require.ErrorIs(t, err, leaserouter.ErrClosed)

		sleep(ld - time.Second)
		require.NoError(t, la.Heartbeat([]byte("p")), "holders may heartbeat while draining")
		require.NoError(t, la.Complete(), "and complete")
		synctest.Wait()
		requireBlocked(t, closed)
		require.NoError(t, lb.Fail(errors.New("boom")), "and fail")
		synctest.Wait()
		require.NoError(t, receive(t, closed))

		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
		require.Equal(t, leaserouter.StateScheduled, get(t, r, "b").State)
		require.NoError(t, r.Close(context.Background()), "second Close")
	})
}

func TestCloseRevokesWhenContextDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: time.Minute, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed := goClose(ctx, r)

		sleep(5*time.Second - time.Nanosecond)
		requireBlocked(t, closed)
		require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State)
		sleep(time.Nanosecond)
		require.ErrorIs(t, receive(t, closed), context.DeadlineExceeded, "draining was cut short")

		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State, "a revoked job goes back to pending")
		require.Equal(t, 1, j.Attempt, "the attempt is kept")
		require.Empty(t, j.Owner)
		for _, op := range []func() error{l.Complete, func() error { return l.Heartbeat(nil) }, l.Release} {
			lle := requireLost(t, op(), l.Token, l.Token)
			require.Equal(t, leaserouter.LostRevoked, lle.Reason)
		}
		require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
		st := r.Stats()
		require.Equal(t, 1, st.Pending)
		require.Equal(t, 0, st.Leased)
		require.Equal(t, uint64(0), st.Dead)
		require.NoError(t, r.Audit())
		require.NoError(t, r.Close(context.Background()), "second Close")

		rel := rec.ofKind(leaserouter.EventReleased)
		require.Len(t, rel, 1)
		require.Equal(t, l.Token, rel[0].Token)
		require.ErrorIs(t, rel[0].Err, leaserouter.ErrClosed)
	})
}

func TestCloseRevocationNeverMakesJobDead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{MaxAttempts: 1})
		require.NoError(t, r.Enqueue("a", ""))
		acquire(t, r, "w")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, r.Close(ctx), context.Canceled)
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, uint64(0), r.Stats().Dead)
	})
}

func TestCloseWithDoneContextAndNoLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, r.Close(ctx), "nothing to drain, nothing cut short")
	})
}

// A lease that expires while Close drains has ended: the drain is over.
func TestCloseDrainEndsWhenLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		closed := goClose(context.Background(), r)
		sleep(ld - time.Nanosecond)
		requireBlocked(t, closed)
		sleep(time.Nanosecond)
		require.NoError(t, receive(t, closed))
		requireLost(t, l.Complete(), l.Token, l.Token)
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 1, j.Attempt)
	})
}

// ---------------------------------------------------------------------------
// Workers

func TestRunProcessesJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		var mu sync.Mutex
		workerOf := map[string]string{}
		h := func(ctx context.Context, l *lease) error {
			mu.Lock()
			defer mu.Unlock()
			workerOf[l.JobID] = l.WorkerID
			return nil
		}
		for i := range 5 {
			require.NoError(t, r.Enqueue(fmt.Sprint("job-", i), ""))
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 2, WorkerID: "w"}, h)
		synctest.Wait()
		require.NoError(t, r.Enqueue("late", ""))
		synctest.Wait()
		requireBlocked(t, done)

		mu.Lock()
		require.Len(t, workerOf, 6)
		workers := map[string]bool{}
		for id, w := range workerOf {
			require.Equal(t, leaserouter.StateSucceeded, get(t, r, id).State, id)
			require.True(t, strings.HasPrefix(w, "w-"), "worker ID %q", w)
			workers[w] = true
		}
		mu.Unlock()
		require.LessOrEqual(t, len(workers), 2)
		require.Equal(t, 6, r.Stats().Succeeded)

		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done), "Run stopped by ctx returns nil")
	})
}

func TestRunHandlerErrorFailsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: hourBackoff})
		require.NoError(t, r.Enqueue("retry", ""))
		require.NoError(t, r.Enqueue("permanent", ""))
		h := func(ctx context.Context, l *lease) error {
			if l.JobID == "permanent" {
				return leaserouter.Permanent(errors.New("bad input"))
			}
			return errors.New("boom")
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		synctest.Wait()

		j := get(t, r, "retry")
		require.Equal(t, leaserouter.StateScheduled, j.State)
		require.Equal(t, "boom", j.LastError)
		require.Equal(t, 1, j.Attempt)
		j = get(t, r, "permanent")
		require.Equal(t, leaserouter.StateFailed, j.State)
		require.Equal(t, "bad input", j.LastError)
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
	})
}

func TestRunHandlerPanicFailsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: hourBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		h := func(ctx context.Context, l *lease) error {
			if l.JobID == "a" {
				panic("kaboom")
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		synctest.Wait()

		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateScheduled, j.State, "a panic is a failed attempt")
		require.Contains(t, j.LastError, "panic")
		require.Contains(t, j.LastError, "kaboom")
		require.Contains(t, j.LastError, "router_test.go", "LastError holds the stack")

		require.NoError(t, r.Enqueue("b", ""))
		synctest.Wait()
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "b").State, "the worker survives the panic")
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
	})
}

func TestRunHandlerContextCanceledWhenJobCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		causes := make(chan error, 1)
		h := func(ctx context.Context, l *lease) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		sleep(3 * ld) // background heartbeats keep it leased
		require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State)
		requireBlocked(t, causes)

		require.NoError(t, r.Cancel("a"))
		synctest.Wait() // no time passes: canceled as soon as the lease is lost
		cause := receive(t, causes)
		require.ErrorIs(t, cause, leaserouter.ErrLeaseLost)
		require.Equal(t, leaserouter.StateCanceled, get(t, r, "a").State, "the handler's error changes nothing")
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
	})
}

func TestRunHandlerContextCanceledWhenLeaseRevoked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		causes := make(chan error, 1)
		h := func(ctx context.Context, l *lease) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		}
		runDone := goRun(context.Background(), r, leaserouter.WorkerOptions{Workers: 1}, h)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 3*ld) // longer than a lease: heartbeats go on
		defer cancel()
		closed := goClose(ctx, r)

		sleep(3*ld - time.Nanosecond)
		requireBlocked(t, causes)
		requireBlocked(t, closed)
		require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State)
		sleep(time.Nanosecond)
		require.ErrorIs(t, receive(t, causes), leaserouter.ErrLeaseLost)
		require.ErrorIs(t, receive(t, closed), context.DeadlineExceeded)
		require.NoError(t, receive(t, runDone), "Run stopped by Close returns nil")
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State, "revoked, not completed by the late nil")
		require.Equal(t, uint64(0), r.Stats().Expirations)
		require.NotContains(t, rec.kinds("a"), "completed")
	})
}

func TestRunReturnsAfterEveryHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("ok", ""))
		require.NoError(t, r.Enqueue("bad", ""))
		var returned atomic.Int32
		h := func(ctx context.Context, l *lease) error {
			<-ctx.Done()
			time.Sleep(5 * time.Second) // winding down takes a while
			returned.Add(1)
			if l.JobID == "bad" {
				return errors.New("stopped")
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 2}, h)
		synctest.Wait()
		require.Equal(t, 2, r.Stats().Leased)

		cancel()
		sleep(5*time.Second - time.Nanosecond)
		requireBlocked(t, done)
		sleep(time.Nanosecond)
		require.NoError(t, receive(t, done))
		require.Equal(t, int32(2), returned.Load(), "Run returned only after every handler")

		// Run's ctx canceled: nil completes, anything else releases.
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "ok").State)
		j := get(t, r, "bad")
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, uint64(0), r.Stats().Retries)
	})
}

func TestRunInvalidOptions(t *testing.T) {
	h := func(context.Context, *lease) error { return nil }
	tests := []struct {
		name  string
		opts  leaserouter.WorkerOptions
		h     leaserouter.Handler[string]
		field string
	}{
		{"negative Workers", leaserouter.WorkerOptions{Workers: -1}, h, "Workers"},
		{"negative HeartbeatInterval", leaserouter.WorkerOptions{HeartbeatInterval: -time.Nanosecond}, h, "HeartbeatInterval"},
		{"HeartbeatInterval == LeaseDuration", leaserouter.WorkerOptions{HeartbeatInterval: ld}, h, "HeartbeatInterval"},
		{"HeartbeatInterval > LeaseDuration", leaserouter.WorkerOptions{HeartbeatInterval: ld + time.Nanosecond}, h, "HeartbeatInterval"},
		{"nil handler", leaserouter.WorkerOptions{}, nil, "andler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				require.NoError(t, r.Enqueue("a", ""))
				err := r.Run(context.Background(), tt.opts, tt.h) // returns at once
				require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
				require.Contains(t, err.Error(), tt.field)
				synctest.Wait()
				require.Equal(t, uint64(0), r.Stats().LeasesGranted, "nothing started")
				require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
			})
		})
	}
}

func TestRunHeartbeatsKeepLongHandlerAlive(t *testing.T) {
	for _, interval := range []time.Duration{0, ld - time.Nanosecond} {
		t.Run(interval.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				require.NoError(t, r.Enqueue("a", ""))
				ctxErrs := make(chan error, 1)
				h := func(ctx context.Context, l *lease) error {
					time.Sleep(4*ld + ld/2)
					ctxErrs <- ctx.Err()
					return nil
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: interval}, h)
				sleep(4*ld + ld/2)
				require.NoError(t, receive(t, ctxErrs), "the handler's ctx stayed alive")
				j := get(t, r, "a")
				require.Equal(t, leaserouter.StateSucceeded, j.State)
				require.Equal(t, 1, j.Attempt)
				st := r.Stats()
				require.Equal(t, uint64(0), st.Expirations)
				require.GreaterOrEqual(t, st.Heartbeats, uint64(4))
				cancel()
				synctest.Wait()
				require.NoError(t, receive(t, done))
			})
		})
	}
}

func TestRunHandlerCheckpointReachesRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: noBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		var mu sync.Mutex
		var progress []string
		h := func(ctx context.Context, l *lease) error {
			mu.Lock()
			progress = append(progress, string(l.Progress))
			mu.Unlock()
			if l.Attempt == 1 {
				if err := l.Heartbeat([]byte("half")); err != nil {
					return leaserouter.Permanent(err)
				}
				return errors.New("crash")
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		synctest.Wait()
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"", "half"}, progress)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
	})
}

// ---------------------------------------------------------------------------
// KeepAlive

func TestKeepAliveKeepsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, 3*time.Second)
		sleep(3*ld + ld/2)
		require.NoError(t, kctx.Err())
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateLeased, j.State)
		require.Equal(t, l.Token, j.Token)
		st := r.Stats()
		require.Equal(t, uint64(0), st.Expirations)
		require.GreaterOrEqual(t, st.Heartbeats, uint64(3))

		stop()
		stop() // idempotent
		require.Error(t, kctx.Err(), "stop cancels the context")
		sleep(ld)
		require.Equal(t, leaserouter.StatePending, get(t, r, "a").State, "no heartbeats after stop")
		require.Equal(t, uint64(1), r.Stats().Expirations)
	})
}

func TestKeepAliveContextCanceledWhenLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, 3*time.Second)
		defer stop()
		sleep(time.Second)
		require.NoError(t, kctx.Err())
		require.NoError(t, r.Cancel("a"))
		// At once: no time passes, so no refused heartbeat could have told it.
		require.Error(t, kctx.Err(), "canceled the moment the lease was lost")
		var lle *leaserouter.LeaseLostError
		require.ErrorAs(t, context.Cause(kctx), &lle)
		require.Equal(t, leaserouter.LostCanceled, lle.Reason)
		require.Equal(t, leaserouter.StateCanceled, get(t, r, "a").State)

		// A lease already expired: canceled with the same cause.
		require.NoError(t, r.Enqueue("b", ""))
		lb := acquire(t, r, "w")
		sleep(ld)
		kctx2, stop2 := leaserouter.KeepAlive(context.Background(), lb, 0)
		defer stop2()
		synctest.Wait()
		require.Error(t, kctx2.Err())
		require.ErrorIs(t, context.Cause(kctx2), leaserouter.ErrLeaseLost)
	})
}

func TestKeepAliveIntervalTooLong(t *testing.T) {
	for _, interval := range []time.Duration{ld, ld + time.Nanosecond, time.Hour} {
		t.Run(interval.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				require.NoError(t, r.Enqueue("a", ""))
				l := acquire(t, r, "w")
				kctx, stop := leaserouter.KeepAlive(context.Background(), l, interval)
				defer stop()
				require.Error(t, kctx.Err(), "canceled at once")
				require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrInvalidOptions)
				require.NoError(t, l.Complete(), "the lease itself is untouched")
			})
		})
	}
}

// TestKeepAliveIntervalFloor: an interval below MinHeartbeatInterval is
// raised to it. (Before, KeepAlive(l, 1ns) made a million heartbeats in
// half a second.)
func TestKeepAliveIntervalFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, time.Nanosecond)
		defer stop()
		sleep(leaserouter.MinHeartbeatInterval - time.Nanosecond)
		require.Zero(t, r.Stats().Heartbeats)
		sleep(time.Nanosecond)
		require.EqualValues(t, 1, r.Stats().Heartbeats)
		sleep(9 * leaserouter.MinHeartbeatInterval)
		require.EqualValues(t, 10, r.Stats().Heartbeats)
		require.NoError(t, kctx.Err())
	})
}

func TestKeepAliveDefaultInterval(t *testing.T) {
	const lease9s = 9 * time.Second // default interval: 3s
	for _, interval := range []time.Duration{0, -time.Second} {
		t.Run(interval.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := setup(t, leaserouter.Options{LeaseDuration: lease9s})
				require.NoError(t, r.Enqueue("a", ""))
				t0 := time.Now()
				l := acquire(t, r, "w")
				kctx, stop := leaserouter.KeepAlive(context.Background(), l, interval)
				defer stop()
				sleep(3*time.Second - time.Nanosecond)
				require.NoError(t, kctx.Err())
				require.True(t, get(t, r, "a").LeaseExpiry.Before(t0.Add(3*time.Second+lease9s)),
					"no heartbeat before LeaseDuration/3")
				sleep(time.Nanosecond)
				requireTime(t, t0.Add(3*time.Second+lease9s), get(t, r, "a").LeaseExpiry,
					"heartbeat at LeaseDuration/3")
				sleep(time.Minute)
				require.NoError(t, kctx.Err())
				require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State)
			})
		})
	}
}

// ---------------------------------------------------------------------------
// Fence

func requireStale(t *testing.T, err error, key string, token, highest leaserouter.Token) {
	t.Helper()
	require.ErrorIs(t, err, leaserouter.ErrStaleToken)
	var ste *leaserouter.StaleTokenError
	require.ErrorAs(t, err, &ste)
	require.Equal(t, leaserouter.StaleTokenError{Key: key, Token: token, Highest: highest}, *ste)
}

func TestFenceAdmit(t *testing.T) {
	var f leaserouter.Fence // the zero value is ready
	require.NoError(t, f.Admit("k", 0), "a fresh key's highest token is 0")
	require.NoError(t, f.Admit("k", 5))
	require.NoError(t, f.Admit("k", 5), "equal to the highest is admitted")
	requireStale(t, f.Admit("k", 4), "k", 4, 5)
	requireStale(t, f.Admit("k", 4), "k", 4, 5)
	require.NoError(t, f.Admit("k", 7))
	requireStale(t, f.Admit("k", 5), "k", 5, 7)
	require.NoError(t, f.Admit("other", 1), "keys are independent")
	require.NoError(t, f.Admit("", 3), "any string is a key")
}

// The brief: errors.As works with a StaleTokenError value target as well.
func TestStaleTokenErrorAsValueTarget(t *testing.T) {
	var f leaserouter.Fence
	require.NoError(t, f.Admit("k", 7))
	err := f.Admit("k", 1)
	requireStale(t, err, "k", 1, 7)
	v, ok, panicked := asStaleTokenValue(err)
	require.Nil(t, panicked, "errors.As with a StaleTokenError value target panicked")
	require.True(t, ok)
	require.Equal(t, leaserouter.StaleTokenError{Key: "k", Token: 1, Highest: 7}, v)
}

func TestFenceDo(t *testing.T) {
	var f leaserouter.Fence
	var writes []leaserouter.Token
	write := func(tok leaserouter.Token) func() error {
		return func() error { writes = append(writes, tok); return nil }
	}
	require.NoError(t, f.Do("k", 10, write(10)))
	requireStale(t, f.Do("k", 9, write(9)), "k", 9, 10)
	require.Equal(t, []leaserouter.Token{10}, writes, "a stale token never writes")

	// A failed write still fences older tokens.
	boom := errors.New("disk full")
	err := f.Do("k", 20, func() error { return boom })
	require.ErrorIs(t, err, boom, "Do returns the write's error")
	requireStale(t, f.Admit("k", 15), "k", 15, 20)

	// nil write: an error, nothing recorded.
	require.ErrorIs(t, f.Do("k", 50, nil), leaserouter.ErrInvalidOptions)
	require.NoError(t, f.Admit("k", 20))

	// Forget resets the key.
	f.Forget("k")
	require.NoError(t, f.Do("k", 1, write(1)))
	require.Equal(t, []leaserouter.Token{10, 1}, writes)
	f.Forget("never-seen") // no-op
	require.NoError(t, f.Admit("never-seen", 0))
}

func TestFenceNil(t *testing.T) {
	var f *leaserouter.Fence
	require.Error(t, f.Admit("k", 1))
	called := false
	require.Error(t, f.Do("k", 1, func() error { called = true; return nil }))
	require.False(t, called)
	require.NotPanics(t, func() { f.Forget("k") })
}

// Concurrent Do on one key runs one write at a time, in token order: a stale
// holder never writes after a newer one.
func TestFenceDoSerialisesOneKey(t *testing.T) {
	var f leaserouter.Fence
	var (
		inside  atomic.Int32
		overlap atomic.Bool
		mu      sync.Mutex
		order   []leaserouter.Token
		refused []error
	)
	var wg sync.WaitGroup
	const goroutines, perG = 8, 50
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				tok := leaserouter.Token(i*goroutines + g + 1)
				err := f.Do("k", tok, func() error {
					if inside.Add(1) > 1 {
						overlap.Store(true)
					}
					runtime.Gosched()
					mu.Lock()
					order = append(order, tok)
					mu.Unlock()
					inside.Add(-1)
					return nil
				})
				if err != nil {
					mu.Lock()
					refused = append(refused, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.False(t, overlap.Load(), "two writes on one key overlapped")
	require.NotEmpty(t, order)
	require.True(t, slices.IsSorted(order), "writes out of token order: %v", order)
	require.Len(t, slices.Compact(slices.Clone(order)), len(order))
	require.Equal(t, goroutines*perG, len(order)+len(refused))
	for _, err := range refused {
		var ste *leaserouter.StaleTokenError
		require.ErrorAs(t, err, &ste)
		require.Greater(t, ste.Highest, ste.Token)
	}
	require.NoError(t, f.Admit("k", order[len(order)-1]))
}

// ---------------------------------------------------------------------------
// More rules

func TestManyLeasesExpireAtOneInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		const n = 1000
		for i := range n {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
		}
		t0 := time.Now()
		for range n {
			acquire(t, r, "w")
		}
		sleep(ld - time.Nanosecond)
		require.Equal(t, n, r.Stats().Leased)
		sleep(time.Nanosecond)
		// The reaper works in bounded passes but finishes them all at this instant.
		expired := rec.ofKind(leaserouter.EventLeaseExpired)
		require.Len(t, expired, n)
		for _, e := range expired {
			requireTime(t, t0.Add(ld), e.Time, "job %s", e.JobID)
		}
		st := r.Stats()
		require.Equal(t, uint64(n), st.Expirations)
		require.Equal(t, n, st.Pending)
		require.Equal(t, 0, st.Leased)
		require.NoError(t, r.Audit())
	})
}

func TestEmptyWorkerID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "")
		require.Empty(t, l.WorkerID)
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateLeased, j.State)
		require.Empty(t, j.Owner)
		require.NoError(t, l.Complete())
	})
}

func TestPayloadOfReferenceTypeIsShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := leaserouter.New[*[]int](leaserouter.Options{})
		require.NoError(t, err)
		defer func() {
			require.NoError(t, r.Close(context.Background()))
			require.NoError(t, r.Audit())
		}()
		p := &[]int{1}
		require.NoError(t, r.Enqueue("a", p))
		j, ok := r.Get("a")
		require.True(t, ok)
		require.Same(t, p, j.Payload)
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.Same(t, p, l.Payload)
		require.NoError(t, l.Complete())
	})
}

func TestRunDefaultWorkerOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		var mu sync.Mutex
		var workers []string
		h := func(ctx context.Context, l *lease) error {
			mu.Lock()
			defer mu.Unlock()
			workers = append(workers, l.WorkerID)
			return nil
		}
		for i := range 3 {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{}, h)
		synctest.Wait()
		require.Equal(t, 3, r.Stats().Succeeded)
		mu.Lock()
		require.Len(t, workers, 3)
		for _, w := range workers {
			require.NotEmpty(t, w, "a default worker ID")
		}
		mu.Unlock()
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
	})
}

func TestKeepAliveCanceledWhenCloseRevokes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, 0)
		defer stop()
		ctx, cancel := context.WithTimeout(context.Background(), 3*ld)
		defer cancel()
		closed := goClose(ctx, r)
		sleep(3*ld - time.Nanosecond)
		require.NoError(t, kctx.Err(), "KeepAlive holds the lease through the drain")
		requireBlocked(t, closed)
		sleep(time.Nanosecond)
		require.ErrorIs(t, receive(t, closed), context.DeadlineExceeded)
		require.Error(t, kctx.Err())
		require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrLeaseLost)
		require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
	})
}

func TestOnEventPanicIsRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var delivered atomic.Int64
		onEvent := func(e leaserouter.Event) {
			if delivered.Add(1) == 1 {
				panic("bad hook")
			}
		}
		r := setup(t, leaserouter.Options{OnEvent: onEvent, Logger: slog.New(&logRecorder{})})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, acquire(t, r, "w").Complete())
		require.NoError(t, r.Close(context.Background()))
		require.Equal(t, int64(3), delivered.Load(), "later events are still delivered")
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
	})
}

func TestKeepAliveContextCanceledWhenHeartbeatRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		kctx, stop := leaserouter.KeepAlive(context.Background(), l, 3*time.Second)
		defer stop()
		require.NoError(t, l.Complete()) // ended without stopping KeepAlive
		sleep(3 * time.Second)           // the next heartbeat is refused
		require.Error(t, kctx.Err())
		var lle *leaserouter.LeaseLostError
		require.ErrorAs(t, context.Cause(kctx), &lle)
		require.Equal(t, l.Token, lle.Token)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
	})
}
