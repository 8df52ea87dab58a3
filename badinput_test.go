package leaserouter_test

// TestBadInput feeds every exported function, method and option the inputs
// a careless or hostile caller could give it — zero, negative, huge, empty,
// nil, stale, after Close — and checks, row by row, the documented answer
// (errors.Is / errors.As, or the documented behaviour), that nothing
// panics, and that nothing else changed: every row runs in its own
// synctest bubble on a fresh fixture holding a job in every situation, and
// Get of each of its IDs, Stats, the events and Audit are compared before
// and after, allowing only the changes the row declares.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// nilCtx is a nil context.Context, the bad input some rows pass on purpose.
var nilCtx context.Context

// badIDs are the IDs every snapshot covers: the fixture's jobs, "" and an
// ID the router never saw.
var badIDs = []string{"stale", "leased", "done", "dead", "canceled", "pending", "sched", "", "unknown"}

// badFx is a Router holding one job in each situation a bad call can meet.
type badFx struct {
	r   *router
	rec *recorder
	l   *lease // valid lease on "leased"; the job's checkpoint is "cp"
	cur *lease // valid lease on "stale" (its second)
	s1  *lease // superseded lease on "stale": released, then re-leased as cur
	dl  *lease // ended by Complete ("done")
	fl  *lease // ended by Fail(Permanent) ("dead")
	cl  *lease // ended by Cancel ("canceled")
	pl  *lease // set by rows whose prep takes "pending"
}

// badSetup builds the fixture at 1s past New (so arithmetic on the router's
// clock starts from a non-zero instant and overflows would show).
// Ready: "pending" (priority 0). Scheduled: "sched" (1h). Leased: "stale"
// (attempt 2) and "leased". Finished and retained: "done", "dead",
// "canceled". Backoff is 1h, LeaseDuration ld.
func badSetup(t *testing.T) *badFx {
	t.Helper()
	rec := &recorder{}
	r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: hourBackoff, OnEvent: rec.record})
	fx := &badFx{r: r, rec: rec}
	sleep(time.Second)
	for i, id := range []string{"stale", "leased", "done", "dead", "canceled", "pending"} {
		require.NoError(t, r.Enqueue(id, "payload-"+id, leaserouter.WithPriority(5-i)))
	}
	require.NoError(t, r.Enqueue("sched", "payload-sched", leaserouter.WithDelay(time.Hour)))
	fx.s1 = acquire(t, r, "w-s1")
	require.NoError(t, fx.s1.Release())
	fx.cur = acquire(t, r, "w-cur")
	require.Equal(t, "stale", fx.cur.JobID)
	fx.l = acquire(t, r, "w-l")
	require.Equal(t, "leased", fx.l.JobID)
	require.NoError(t, fx.l.Heartbeat([]byte("cp")))
	fx.dl = acquire(t, r, "w-done")
	require.NoError(t, fx.dl.Complete())
	fx.fl = acquire(t, r, "w-dead")
	require.NoError(t, fx.fl.Fail(leaserouter.Permanent(errors.New("boom"))))
	fx.cl = acquire(t, r, "w-canceled")
	require.Equal(t, "canceled", fx.cl.JobID)
	require.NoError(t, r.Cancel("canceled"))
	synctest.Wait()
	st := r.Stats()
	require.Equal(t, [6]int{1, 1, 2, 1, 1, 1},
		[6]int{st.Pending, st.Scheduled, st.Leased, st.Succeeded, st.DeadJobs, st.Canceled}, "fixture states")
	require.NoError(t, r.Audit())
	return fx
}

type badGot struct {
	j  job
	ok bool
}

type badSnap struct {
	jobs   map[string]badGot
	stats  leaserouter.Stats
	events []string
}

func badSnapshot(fx *badFx, extra ...string) badSnap {
	s := badSnap{jobs: make(map[string]badGot), stats: fx.r.Stats()}
	for _, id := range append(slices.Clone(badIDs), extra...) {
		j, ok := fx.r.Get(id)
		s.jobs[id] = badGot{j, ok}
	}
	for _, e := range fx.rec.all() {
		s.events = append(s.events, badEv(e.Kind.String(), e.JobID))
	}
	return s
}

// badEv names an event "kind:job", shortening huge IDs.
func badEv(kind, id string) string {
	if len(id) > 32 {
		id = fmt.Sprintf("%s...(%d bytes)", id[:8], len(id))
	}
	return kind + ":" + id
}

type badRow struct {
	name    string
	own     bool                          // the row needs no fixture (fx is nil): it checks its own Router or value
	prep    func(t *testing.T, fx *badFx) // runs before the "before" snapshot
	run     func(t *testing.T, fx *badFx) // the bad call and its documented result
	touched []string                      // jobs the row may change (it checks them itself)
	stats   func(s *leaserouter.Stats)    // the documented change to Stats, if any
	events  []string                      // the documented new events, "kind:job"
}

func TestBadInput(t *testing.T) {
	rows := badRows()
	names := make(map[string]bool)
	for _, row := range rows {
		require.False(t, names[row.name], "duplicate row %q", row.name)
		names[row.name] = true
		t.Run(row.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if row.own {
					require.NotPanics(t, func() { row.run(t, nil) })
					return
				}
				fx := badSetup(t)
				if row.prep != nil {
					require.NotPanics(t, func() { row.prep(t, fx) }, "prep")
					synctest.Wait()
				}
				require.NoError(t, fx.r.Audit(), "Audit before")
				before := badSnapshot(fx)
				require.NotPanics(t, func() { row.run(t, fx) })
				synctest.Wait()
				badCheck(t, fx, before, row)
			})
		})
	}
}

// badCheck compares the state after a row with the state before it, plus
// the row's declared changes.
func badCheck(t *testing.T, fx *badFx, before badSnap, row badRow) {
	t.Helper()
	after := badSnapshot(fx)
	for _, id := range badIDs {
		if slices.Contains(row.touched, id) {
			continue
		}
		require.Equal(t, before.jobs[id], after.jobs[id], "job %q changed", id)
	}
	want := before.stats
	if row.stats != nil {
		row.stats(&want)
	}
	// ReadySince follows the head of the ready order, which every lease
	// granted moves; the rows declare changes of counts and totals.
	want.ReadySince, after.stats.ReadySince = time.Time{}, time.Time{}
	require.Equal(t, want, after.stats, "Stats")
	var evs []string
	if n := len(before.events); len(after.events) > n {
		evs = after.events[n:]
	}
	require.Equal(t, row.events, evs, "new events")
	require.NoError(t, fx.r.Audit(), "Audit after")
}

// badLost checks err refuses lease l as documented: a *LeaseLostError (also
// matched as a value target) for l's token, with current and reason.
func badLost(t *testing.T, err error, l *lease, current leaserouter.Token, reason string) {
	t.Helper()
	lle := requireLost(t, err, l.Token, current)
	require.Equal(t, leaserouter.LostReason(reason), lle.Reason)
	require.Equal(t, l.JobID, lle.JobID)
	var v leaserouter.LeaseLostError
	require.ErrorAs(t, err, &v)
	require.Equal(t, *lle, v)
}

// badRejected checks the stale_rejected event of a refused operation on l.
func badRejected(t *testing.T, fx *badFx, l *lease) {
	t.Helper()
	synctest.Wait()
	e := fx.rec.last(t, l.JobID)
	require.Equal(t, leaserouter.EventStaleRejected, e.Kind)
	require.Equal(t, l.Token, e.Token, "stale_rejected carries the refused lease's token")
	require.Equal(t, l.Attempt, e.Attempt)
	require.ErrorIs(t, e.Err, leaserouter.ErrLeaseLost)
}

func badStale(s *leaserouter.Stats) { s.StaleRejections++ }

func badCancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func badCloseNow(t *testing.T, fx *badFx) {
	t.Helper()
	require.ErrorIs(t, fx.r.Close(badCancelled()), context.Canceled)
}

func badNop(context.Context, *lease) error { return nil }

// badLeaseOps are the lease operations that can be refused.
var badLeaseOps = []struct {
	name      string
	op        func(l *lease) error
	heartbeat bool // a refusal also counts in Stats.HeartbeatsRefused
}{
	{"Heartbeat(nil)", func(l *lease) error { return l.Heartbeat(nil) }, true},
	{"Heartbeat(progress)", func(l *lease) error { return l.Heartbeat([]byte("x")) }, true},
	{"Complete", func(l *lease) error { return l.Complete() }, false},
	{"Fail(err)", func(l *lease) error { return l.Fail(errors.New("x")) }, false},
	{"Fail(nil)", func(l *lease) error { return l.Fail(nil) }, false},
	{"Release", func(l *lease) error { return l.Release() }, false},
	{"Snooze(0)", func(l *lease) error { return l.Snooze(0) }, false},
	{"Snooze(1s)", func(l *lease) error { return l.Snooze(time.Second) }, false},
}

// staleStats is the change in Stats of a refused lease operation.
func staleStats(heartbeat bool) func(s *leaserouter.Stats) {
	if heartbeat {
		return func(s *leaserouter.Stats) { s.StaleRejections++; s.HeartbeatsRefused++ }
	}
	return badStale
}

func badRows() []badRow {
	var rows []badRow
	rows = append(rows, badNewRows()...)
	rows = append(rows, badEnqueueRows()...)
	rows = append(rows, badAcquireRows()...)
	rows = append(rows, badQueryRows()...)
	rows = append(rows, badCloseRows()...)
	rows = append(rows, badLeaseRows()...)
	rows = append(rows, badRunRows()...)
	rows = append(rows, badKeepAliveRows()...)
	rows = append(rows, badFenceRows()...)
	rows = append(rows, badValueRows()...)
	rows = append(rows, badNameRows()...)
	rows = append(rows, badAdminRows()...)
	rows = append(rows, badPeriodicRows()...)
	return rows
}

// ---------------------------------------------------------------------------
// New: every Options field

func badNewInvalid(name string, opts leaserouter.Options, field string) badRow {
	return badRow{name: "New/" + name, own: true, run: func(t *testing.T, _ *badFx) {
		r, err := leaserouter.New[string](opts)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		require.ErrorContains(t, err, field, "the error names the field")
		require.Nil(t, r)
	}}
}

func badNewRows() []badRow {
	huge := time.Duration(math.MaxInt64)
	far := func(t *testing.T, at time.Time) {
		t.Helper()
		require.True(t, at.After(time.Now().AddDate(200, 0, 0)), "%v is not far in the future", at)
	}
	return []badRow{
		{name: "New/zero Options gets every default", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{})
			require.NoError(t, r.Enqueue("a", ""))
			require.NoError(t, r.Enqueue("b", ""))
			la := acquire(t, r, "w")
			requireTime(t, time.Now().Add(leaserouter.DefaultLeaseDuration), la.Expiry(), "LeaseDuration default")
			require.Equal(t, leaserouter.DefaultMaxAttempts, get(t, r, "a").MaxAttempts, "MaxAttempts default")
			require.NoError(t, la.Fail(errors.New("x")))
			runAt := get(t, r, "a").RunAt
			require.True(t, !runAt.Before(time.Now().Add(time.Second/2)) && runAt.Before(time.Now().Add(time.Second)),
				"Backoff default (1s with jitter): run-at %v", time.Until(runAt))
			lb := acquire(t, r, "w")
			require.NoError(t, lb.Complete())
			sleep(leaserouter.DefaultRetention - time.Nanosecond)
			require.Equal(t, leaserouter.StateSucceeded, get(t, r, "b").State, "Retention default: kept")
			sleep(time.Nanosecond)
			requireGone(t, r, "b")
			require.NoError(t, r.Audit())
		}},
		badNewInvalid("LeaseDuration -1ns", leaserouter.Options{LeaseDuration: -1}, "LeaseDuration"),
		badNewInvalid("LeaseDuration MinInt64", leaserouter.Options{LeaseDuration: math.MinInt64}, "LeaseDuration"),
		{name: "New/LeaseDuration MaxInt64 saturates to never", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{LeaseDuration: huge})
			sleep(time.Second)
			require.NoError(t, r.Enqueue("a", ""))
			l := acquire(t, r, "w")
			exp := l.Expiry()
			far(t, exp)
			sleep(time.Hour)
			require.NoError(t, l.Heartbeat(nil))
			require.False(t, l.Expiry().Before(exp), "a heartbeat never shortens a lease")
			j := get(t, r, "a")
			require.Equal(t, leaserouter.StateLeased, j.State)
			requireTime(t, l.Expiry(), j.LeaseExpiry, "Job.LeaseExpiry")
			require.NoError(t, l.Complete())
			require.NoError(t, r.Audit())
		}},
		{name: "New/LeaseDuration near MaxInt64: Heartbeat extends (saturating)", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{LeaseDuration: huge - time.Hour})
			sleep(time.Second)
			require.NoError(t, r.Enqueue("a", ""))
			l := acquire(t, r, "w")
			exp := l.Expiry()
			sleep(2 * time.Hour)
			require.NoError(t, l.Heartbeat(nil))
			// now+LeaseDuration is past the int64 range: the extension
			// should saturate (as lease grant and WithDelay do), not vanish.
			require.True(t, l.Expiry().After(exp),
				"Heartbeat must extend to now+LeaseDuration (saturated): expiry stayed %v", l.Expiry())
			require.NoError(t, r.Audit())
		}},
		badNewInvalid("MaxAttempts -1", leaserouter.Options{MaxAttempts: -1}, "MaxAttempts"),
		badNewInvalid("MaxAttempts MinInt", leaserouter.Options{MaxAttempts: math.MinInt}, "MaxAttempts"),
		badNewInvalid("MaxAttempts MaxInt", leaserouter.Options{MaxAttempts: math.MaxInt}, "MaxAttempts"),
		{name: "New/MaxAttempts MaxInt32 is accepted", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{MaxAttempts: math.MaxInt32})
			require.NoError(t, r.Enqueue("a", ""))
			require.Equal(t, math.MaxInt32, get(t, r, "a").MaxAttempts)
		}},
		{name: "New/Backoff MinInt64 retries at once", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{Backoff: func(int) time.Duration { return math.MinInt64 }})
			sleep(time.Second)
			require.NoError(t, r.Enqueue("a", ""))
			require.NoError(t, acquire(t, r, "w").Fail(errors.New("x")))
			j := get(t, r, "a")
			require.Equal(t, leaserouter.StatePending, j.State)
			require.Equal(t, 1, j.Attempt)
			require.Equal(t, "a", acquire(t, r, "w").JobID)
		}},
		{name: "New/Backoff MaxInt64 schedules (saturating), never retries at once", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{Backoff: func(int) time.Duration { return huge }})
			sleep(time.Second) // the router's clock is now 1s: now+MaxInt64 overflows
			require.NoError(t, r.Enqueue("a", ""))
			require.NoError(t, acquire(t, r, "w").Fail(errors.New("x")))
			j := get(t, r, "a")
			require.Equal(t, leaserouter.StateScheduled, j.State,
				"Fail must schedule the retry after Backoff(1) = MaxInt64, got %v (run-at %v)", j.State, j.RunAt)
			far(t, j.RunAt)
			requireNoJob(t, r)
			require.NoError(t, r.Audit())
		}},
		{name: "New/Retention -1ns drops finished jobs at once", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{Retention: -1})
			require.NoError(t, r.Enqueue("a", ""))
			require.NoError(t, acquire(t, r, "w").Complete())
			requireGone(t, r, "a")
			require.Equal(t, uint64(1), r.Stats().Purged)
			require.Equal(t, 0, r.Stats().Succeeded)
			require.NoError(t, r.Enqueue("a", ""), "a dropped ID is free again")
		}},
		{name: "New/Retention MinInt64 drops finished jobs at once", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{Retention: math.MinInt64})
			require.NoError(t, r.Enqueue("a", ""))
			require.NoError(t, r.Cancel("a"))
			requireGone(t, r, "a")
			require.Equal(t, uint64(1), r.Stats().Purged)
		}},
		{name: "New/Retention MaxInt64 keeps finished jobs", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{Retention: huge})
			sleep(time.Second)
			require.NoError(t, r.Enqueue("a", ""))
			require.NoError(t, acquire(t, r, "w").Complete())
			sleep(24 * 365 * time.Hour)
			require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
			require.ErrorIs(t, r.Enqueue("a", ""), leaserouter.ErrDuplicate)
			require.NoError(t, r.Audit())
		}},
		badNewInvalid("Capacity -1", leaserouter.Options{Capacity: -1}, "Capacity"),
		badNewInvalid("Capacity MinInt", leaserouter.Options{Capacity: math.MinInt}, "Capacity"),
		{name: "New/Capacity 1 refuses the second unfinished job", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{Capacity: 1})
			require.NoError(t, r.Enqueue("a", ""))
			require.ErrorIs(t, r.Enqueue("b", ""), leaserouter.ErrFull)
			requireGone(t, r, "b")
			require.Equal(t, uint64(1), r.Stats().Enqueued)
			require.NoError(t, r.Cancel("a"))
			require.NoError(t, r.Enqueue("b", ""), "a finished job does not count")
		}},
		{name: "New/Capacity MaxInt is unlimited in practice", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{Capacity: math.MaxInt})
			for i := range 100 {
				require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
			}
			require.Equal(t, 100, r.Stats().Pending)
		}},
		badNewInvalid("TokenFloor MaxInt64", leaserouter.Options{TokenFloor: math.MaxInt64}, "TokenFloor"),
		badNewInvalid("TokenFloor MaxUint64", leaserouter.Options{TokenFloor: math.MaxUint64}, "TokenFloor"),
		{name: "New/TokenFloor MaxInt64-1 grants one lease, then ErrTokensExhausted", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{TokenFloor: math.MaxInt64 - 1})
			require.NoError(t, r.Enqueue("a", ""))
			require.NoError(t, r.Enqueue("b", ""))
			l := acquire(t, r, "w")
			require.Equal(t, leaserouter.Token(math.MaxInt64), l.Token)
			l2, err := r.TryAcquire("w")
			require.ErrorIs(t, err, leaserouter.ErrTokensExhausted)
			require.Nil(t, l2)
			j := get(t, r, "b")
			require.Equal(t, leaserouter.StatePending, j.State, "nothing taken")
			require.Zero(t, j.Attempt)
			require.Equal(t, uint64(1), r.Stats().LeasesGranted)
			require.NoError(t, r.Audit())
		}},
		{name: "New/TokenFloor 0 starts above the wall clock", own: true, run: func(t *testing.T, _ *badFx) {
			wall := leaserouter.Token(time.Now().UnixNano())
			r := setup(t, leaserouter.Options{})
			require.NoError(t, r.Enqueue("a", ""))
			require.Greater(t, acquire(t, r, "w").Token, wall)
		}},
		{name: "New/TokenFloor above the wall clock", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{TokenFloor: 1 << 62})
			require.NoError(t, r.Enqueue("a", ""))
			require.Equal(t, leaserouter.Token(1<<62+1), acquire(t, r, "w").Token)
		}},
	}
}

// ---------------------------------------------------------------------------
// Enqueue

func badEnqueueInvalid(name, contains string, id string, opts ...leaserouter.EnqueueOption) badRow {
	return badRow{name: "Enqueue/" + name, run: func(t *testing.T, fx *badFx) {
		err := fx.r.Enqueue(id, "p", opts...)
		require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
		require.ErrorContains(t, err, contains, "the error names the bad input")
		requireGone(t, fx.r, "new")
	}}
}

// badEnqueued is a row whose Enqueue("new", ...) is accepted; check sees
// the stored job. opts is called in the bubble, so it may use time.Now.
func badEnqueued(name string, state leaserouter.State, check func(t *testing.T, j job), opts func() []leaserouter.EnqueueOption) badRow {
	return badRow{
		name: "Enqueue/" + name,
		run: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.Enqueue("new", "p", opts()...))
			j := get(t, fx.r, "new")
			require.Equal(t, state, j.State)
			require.Equal(t, "p", j.Payload)
			requireTime(t, time.Now(), j.CreatedAt, "CreatedAt")
			require.Zero(t, j.Attempt)
			if check != nil {
				check(t, j)
			}
		},
		stats: func(s *leaserouter.Stats) {
			s.Enqueued++
			if state == leaserouter.StatePending {
				s.Pending++
			} else {
				s.Scheduled++
			}
		},
		events: []string{"enqueued:new"},
	}
}

func badOpts(opts ...leaserouter.EnqueueOption) func() []leaserouter.EnqueueOption {
	return func() []leaserouter.EnqueueOption { return opts }
}

func badEnqueueRows() []badRow {
	huge := time.Duration(math.MaxInt64)
	far := func(t *testing.T, j job) {
		require.True(t, j.RunAt.After(time.Now().AddDate(200, 0, 0)), "run-at %v is not far in the future", j.RunAt)
	}
	noRunAt := func(t *testing.T, j job) { require.True(t, j.RunAt.IsZero(), "RunAt %v", j.RunAt) }
	return []badRow{
		badEnqueueInvalid("empty ID", "empty", ""),
		badEnqueueInvalid("empty ID with valid options", "empty", "", leaserouter.WithPriority(1), leaserouter.WithDelay(time.Second)),
		badEnqueueInvalid("WithMaxAttempts(0)", "WithMaxAttempts", "new", leaserouter.WithMaxAttempts(0)),
		badEnqueueInvalid("WithMaxAttempts(-1)", "WithMaxAttempts", "new", leaserouter.WithMaxAttempts(-1)),
		badEnqueueInvalid("WithMaxAttempts(MinInt)", "WithMaxAttempts", "new", leaserouter.WithMaxAttempts(math.MinInt)),
		badEnqueueInvalid("WithMaxAttempts(MaxInt)", "WithMaxAttempts", "new", leaserouter.WithMaxAttempts(math.MaxInt)),
		badEnqueueInvalid("WithDelay(-1ns)", "WithDelay", "new", leaserouter.WithDelay(-1)),
		badEnqueueInvalid("WithDelay(MinInt64)", "WithDelay", "new", leaserouter.WithDelay(math.MinInt64)),
		badEnqueueInvalid("WithTimeout(-1ns)", "WithTimeout", "new", leaserouter.WithTimeout(-1)),
		badEnqueueInvalid("WithTimeout(MinInt64)", "WithTimeout", "new", leaserouter.WithTimeout(math.MinInt64)),
		badEnqueueInvalid("WithDelay(-1ns) then WithRunAt", "WithDelay", "new", leaserouter.WithDelay(-1), leaserouter.WithRunAt(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))),
		{name: "Enqueue/invalid option on a known ID is ErrInvalidJob, not a duplicate", run: func(t *testing.T, fx *badFx) {
			err := fx.r.Enqueue("pending", "p", leaserouter.WithMaxAttempts(0))
			require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
			require.NotErrorIs(t, err, leaserouter.ErrDuplicate)
		}},
		{name: "Enqueue/known pending ID", run: func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Enqueue("pending", "other"), leaserouter.ErrDuplicate)
		}, stats: func(s *leaserouter.Stats) { s.Duplicates++ }, events: []string{"duplicate:pending"}},
		{name: "Enqueue/known finished ID within Retention", run: func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Enqueue("done", "other"), leaserouter.ErrDuplicate)
		}, stats: func(s *leaserouter.Stats) { s.Duplicates++ }, events: []string{"duplicate:done"}},
		badEnqueued("WithMaxAttempts(MaxInt32)", leaserouter.StatePending, func(t *testing.T, j job) {
			require.Equal(t, math.MaxInt32, j.MaxAttempts)
		}, badOpts(leaserouter.WithMaxAttempts(math.MaxInt32))),
		badEnqueued("WithDelay(0) is ready at once", leaserouter.StatePending, noRunAt, badOpts(leaserouter.WithDelay(0))),
		badEnqueued("WithDelay(MaxInt64) saturates", leaserouter.StateScheduled, far, badOpts(leaserouter.WithDelay(huge))),
		badEnqueued("WithRunAt(zero Time) is ready at once", leaserouter.StatePending, noRunAt, badOpts(leaserouter.WithRunAt(time.Time{}))),
		badEnqueued("WithRunAt(year 1) is ready at once", leaserouter.StatePending, noRunAt,
			badOpts(leaserouter.WithRunAt(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)))),
		badEnqueued("WithRunAt(Unix 0) is ready at once", leaserouter.StatePending, noRunAt, badOpts(leaserouter.WithRunAt(time.Unix(0, 0)))),
		badEnqueued("WithRunAt(now) is ready at once", leaserouter.StatePending, noRunAt, func() []leaserouter.EnqueueOption {
			return []leaserouter.EnqueueOption{leaserouter.WithRunAt(time.Now())}
		}),
		badEnqueued("WithRunAt(year 9999) is scheduled", leaserouter.StateScheduled, far,
			badOpts(leaserouter.WithRunAt(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)))),
		badEnqueued("zero EnqueueOption is ignored", leaserouter.StatePending, func(t *testing.T, j job) {
			require.Zero(t, j.Priority)
			require.Equal(t, leaserouter.DefaultMaxAttempts, j.MaxAttempts)
		}, badOpts(leaserouter.EnqueueOption{})),
		{
			name: "Enqueue/WithRunAt(now+1ns) becomes ready at exactly run-at",
			run: func(t *testing.T, fx *badFx) {
				at := time.Now().Add(time.Nanosecond)
				require.NoError(t, fx.r.Enqueue("new", "p", leaserouter.WithRunAt(at)))
				j := get(t, fx.r, "new")
				require.Equal(t, leaserouter.StateScheduled, j.State)
				requireTime(t, at, j.RunAt, "run-at kept to the nanosecond")
				sleep(time.Nanosecond)
				require.Equal(t, leaserouter.StatePending, get(t, fx.r, "new").State)
			},
			stats:  func(s *leaserouter.Stats) { s.Enqueued++; s.Pending++ },
			events: []string{"enqueued:new"},
		},
		{
			name: "Enqueue/WithPriority(MaxInt) runs first",
			run: func(t *testing.T, fx *badFx) {
				require.NoError(t, fx.r.Enqueue("new", "p", leaserouter.WithPriority(math.MaxInt)))
				require.Equal(t, math.MaxInt, get(t, fx.r, "new").Priority)
				require.Equal(t, "new", acquire(t, fx.r, "w").JobID)
			},
			touched: []string{"new"},
			stats:   func(s *leaserouter.Stats) { s.Enqueued++; s.LeasesGranted++; s.Leased++ },
			events:  []string{"enqueued:new", "lease_acquired:new"},
		},
		{
			name: "Enqueue/WithPriority(MinInt) runs last",
			run: func(t *testing.T, fx *badFx) {
				require.NoError(t, fx.r.Enqueue("new", "p", leaserouter.WithPriority(math.MinInt)))
				require.Equal(t, math.MinInt, get(t, fx.r, "new").Priority)
				require.Equal(t, "pending", acquire(t, fx.r, "w").JobID)
				require.Equal(t, "new", acquire(t, fx.r, "w").JobID)
			},
			touched: []string{"pending"},
			stats: func(s *leaserouter.Stats) {
				s.Enqueued++
				s.LeasesGranted += 2
				s.Pending--
				s.Leased += 2
			},
			events: []string{"enqueued:new", "lease_acquired:pending", "lease_acquired:new"},
		},
	}
}

// ---------------------------------------------------------------------------
// Acquire, TryAcquire

func badTakePending(t *testing.T, fx *badFx) {
	fx.pl = acquire(t, fx.r, "hold")
	require.Equal(t, "pending", fx.pl.JobID)
}

func badAcquireRows() []badRow {
	refused := func(name string, ctx func() context.Context, want error) badRow {
		return badRow{name: "Acquire/" + name + " gets no job", run: func(t *testing.T, fx *badFx) {
			l, err := fx.r.Acquire(ctx(), "w")
			require.ErrorIs(t, err, want)
			require.Nil(t, l)
		}}
	}
	return []badRow{
		{
			name: "Acquire/nil ctx with a job ready",
			run: func(t *testing.T, fx *badFx) {
				l, err := fx.r.Acquire(nilCtx, "w")
				require.NoError(t, err)
				require.Equal(t, "pending", l.JobID)
				require.Equal(t, leaserouter.StateLeased, get(t, fx.r, "pending").State)
			},
			touched: []string{"pending"},
			stats:   func(s *leaserouter.Stats) { s.LeasesGranted++; s.Pending--; s.Leased++ },
			events:  []string{"lease_acquired:pending"},
		},
		{
			name: "Acquire/nil ctx blocks until a job is ready",
			prep: badTakePending,
			run: func(t *testing.T, fx *badFx) {
				ch := goAcquire(nilCtx, fx.r, "w")
				synctest.Wait()
				requireBlocked(t, ch)
				require.NoError(t, fx.r.Enqueue("new", "p"))
				synctest.Wait()
				res := receive(t, ch)
				require.NoError(t, res.err)
				require.Equal(t, "new", res.l.JobID)
			},
			stats:  func(s *leaserouter.Stats) { s.Enqueued++; s.LeasesGranted++; s.Leased++ },
			events: []string{"enqueued:new", "lease_acquired:new"},
		},
		refused("canceled ctx with a job ready", badCancelled, context.Canceled),
		refused("deadline passed with a job ready", func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Nanosecond))
			_ = cancel // already done; nothing to release in a bubble that ends
			return ctx
		}, context.DeadlineExceeded),
		{
			name: "Acquire/canceled while blocked returns ctx.Err and leaves no waiter",
			prep: badTakePending,
			run: func(t *testing.T, fx *badFx) {
				ctx, cancel := context.WithCancel(context.Background())
				ch := goAcquire(ctx, fx.r, "w")
				synctest.Wait()
				requireBlocked(t, ch)
				cancel()
				synctest.Wait()
				res := receive(t, ch)
				require.ErrorIs(t, res.err, context.Canceled)
				require.Nil(t, res.l)
			},
		},
		{
			name: "Acquire/deadline reached while blocked",
			prep: badTakePending,
			run: func(t *testing.T, fx *badFx) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				ch := goAcquire(ctx, fx.r, "w")
				sleep(time.Second - time.Nanosecond)
				requireBlocked(t, ch)
				sleep(time.Nanosecond)
				res := receive(t, ch)
				require.ErrorIs(t, res.err, context.DeadlineExceeded)
				require.Nil(t, res.l)
			},
		},
		{
			name: "Acquire/empty workerID",
			run: func(t *testing.T, fx *badFx) {
				l, err := fx.r.Acquire(context.Background(), "")
				require.NoError(t, err)
				require.Empty(t, l.WorkerID)
				j := get(t, fx.r, "pending")
				require.Equal(t, leaserouter.StateLeased, j.State)
				require.Empty(t, j.Owner)
			},
			touched: []string{"pending"},
			stats:   func(s *leaserouter.Stats) { s.LeasesGranted++; s.Pending--; s.Leased++ },
			events:  []string{"lease_acquired:pending"},
		},
		{
			name: "TryAcquire/empty workerID",
			run: func(t *testing.T, fx *badFx) {
				l := acquire(t, fx.r, "")
				require.Equal(t, "pending", l.JobID)
				require.Empty(t, get(t, fx.r, "pending").Owner)
			},
			touched: []string{"pending"},
			stats:   func(s *leaserouter.Stats) { s.LeasesGranted++; s.Pending--; s.Leased++ },
			events:  []string{"lease_acquired:pending"},
		},
		{name: "TryAcquire/nothing ready", prep: badTakePending, run: func(t *testing.T, fx *badFx) {
			requireNoJob(t, fx.r)
		}},
	}
}

// ---------------------------------------------------------------------------
// Get, Cancel, Stats, Audit

func badQueryRows() []badRow {
	gone := func(id string) badRow {
		return badRow{name: fmt.Sprintf("Get/%q", id), run: func(t *testing.T, fx *badFx) {
			j, ok := fx.r.Get(id)
			require.False(t, ok)
			require.Equal(t, job{}, j, "the zero Job")
		}}
	}
	finished := func(id string) badRow {
		return badRow{name: "Cancel/finished " + id + " changes nothing", run: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.Cancel(id))
		}}
	}
	return []badRow{
		gone(""),
		gone("unknown"),
		{name: `Cancel/""`, run: func(t *testing.T, fx *badFx) {
			err := fx.r.Cancel("")
			require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
			require.ErrorIs(t, err, leaserouter.ErrNotFound)
		}},
		{name: "Cancel/unknown", run: func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Cancel("unknown"), leaserouter.ErrNotFound)
		}},
		finished("done"),
		finished("dead"),
		finished("canceled"),
		{name: "Stats/has no side effect", run: func(t *testing.T, fx *badFx) {
			require.Equal(t, fx.r.Stats(), fx.r.Stats())
		}},
		{name: "Audit/has no side effect", run: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.Audit())
			require.NoError(t, fx.r.Audit())
		}},
	}
}

// ---------------------------------------------------------------------------
// Close, and everything after it

func badAfterClose(name string, run func(t *testing.T, fx *badFx)) badRow {
	return badRow{name: "after Close/" + name, prep: badCloseNow, run: run}
}

func badCloseRows() []badRow {
	revoked := func(s *leaserouter.Stats) { s.Leased -= 2; s.Pending += 2 }
	revokedTouched := []string{"stale", "leased"}
	requireRevoked := func(t *testing.T, fx *badFx, lastErr string) {
		t.Helper()
		for _, l := range []*lease{fx.cur, fx.l} {
			j := get(t, fx.r, l.JobID)
			require.Equal(t, leaserouter.StatePending, j.State, "%s back to pending", l.JobID)
			require.Equal(t, l.Attempt, j.Attempt, "%s keeps its attempt", l.JobID)
			require.Equal(t, l.Token, j.Token)
			require.Empty(t, j.Owner)
			require.Equal(t, lastErr, j.LastError)
		}
	}
	rows := []badRow{
		{
			name: "Close/nil ctx drains until the leases expire",
			run: func(t *testing.T, fx *badFx) {
				require.NoError(t, fx.r.Close(nilCtx))
				requireRevoked(t, fx, "lease expired")
			},
			touched: revokedTouched,
			stats: func(s *leaserouter.Stats) {
				revoked(s)
				s.Expirations += 2
			},
			events: []string{"lease_expired:stale", "lease_expired:leased"},
		},
		{
			name: "Close/canceled ctx revokes held leases",
			run: func(t *testing.T, fx *badFx) {
				badCloseNow(t, fx)
				requireRevoked(t, fx, "")
				for _, e := range fx.rec.ofKind(leaserouter.EventReleased)[1:] { // [0] is s1's own Release
					require.ErrorIs(t, e.Err, leaserouter.ErrClosed)
				}
			},
			touched: revokedTouched,
			stats:   revoked,
			events:  []string{"released:stale", "released:leased"},
		},
		{
			name: "Close/deadline passed revokes held leases",
			run: func(t *testing.T, fx *badFx) {
				ctx, cancel := context.WithDeadline(context.Background(), time.Now())
				defer cancel()
				require.ErrorIs(t, fx.r.Close(ctx), context.DeadlineExceeded)
				requireRevoked(t, fx, "")
			},
			touched: revokedTouched,
			stats:   revoked,
			events:  []string{"released:stale", "released:leased"},
		},
		badAfterClose("Close twice (nil ctx, canceled ctx) returns nil", func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.Close(nilCtx))
			require.NoError(t, fx.r.Close(badCancelled()))
		}),
		badAfterClose("Enqueue", func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Enqueue("new", "p"), leaserouter.ErrClosed)
		}),
		badAfterClose("Flush (nil ctx, canceled ctx) returns nil: every event is delivered", func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.Flush(nilCtx))
			require.NoError(t, fx.r.Flush(badCancelled()))
		}),
		badAfterClose("Enqueue of a known ID is ErrClosed, not counted as a duplicate", func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Enqueue("pending", "p"), leaserouter.ErrClosed)
		}),
		badAfterClose("Acquire", func(t *testing.T, fx *badFx) {
			l, err := fx.r.Acquire(context.Background(), "w")
			require.ErrorIs(t, err, leaserouter.ErrClosed)
			require.Nil(t, l)
		}),
		badAfterClose("Acquire nil ctx", func(t *testing.T, fx *badFx) {
			l, err := fx.r.Acquire(nilCtx, "w")
			require.ErrorIs(t, err, leaserouter.ErrClosed)
			require.Nil(t, l)
		}),
		badAfterClose("TryAcquire", func(t *testing.T, fx *badFx) {
			l, err := fx.r.TryAcquire("w")
			require.ErrorIs(t, err, leaserouter.ErrClosed)
			require.Nil(t, l)
		}),
		badAfterClose("Cancel of a pending job", func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Cancel("pending"), leaserouter.ErrClosed)
		}),
		badAfterClose("Cancel unknown", func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Cancel("unknown"), leaserouter.ErrClosed)
		}),
		badAfterClose("Run", func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Run(context.Background(), leaserouter.WorkerOptions{}, badNop), leaserouter.ErrClosed)
		}),
		badAfterClose("Get, Stats and Audit answer from the frozen state an hour on", func(t *testing.T, fx *badFx) {
			sleep(2 * time.Hour) // "sched" is due at 1h, retention ends at 10m: nothing is settled
			require.Equal(t, leaserouter.StateScheduled, get(t, fx.r, "sched").State)
			require.Equal(t, leaserouter.StateSucceeded, get(t, fx.r, "done").State)
			require.NoError(t, fx.r.Audit())
		}),
		badAfterClose("Expiry of a revoked lease keeps its last expiry", func(t *testing.T, fx *badFx) {
			requireTime(t, time.Now().Add(ld), fx.l.Expiry(), "granted now, never extended")
		}),
		badAfterClose("KeepAlive of a revoked lease", func(t *testing.T, fx *badFx) {
			ctx, cancel := leaserouter.KeepAlive(context.Background(), fx.l, 0)
			defer cancel()
			require.Error(t, ctx.Err(), "canceled at once")
			badLost(t, context.Cause(ctx), fx.l, fx.l.Token, "revoked")
		}),
	}
	// After Close the state is frozen: a refused lease operation counts no
	// stale rejection and emits no event (Close has delivered the last one).
	for _, op := range badLeaseOps {
		rows = append(rows, badRow{
			name: "after Close/" + op.name + " on a revoked lease",
			prep: badCloseNow,
			run: func(t *testing.T, fx *badFx) {
				badLost(t, op.op(fx.l), fx.l, fx.l.Token, "revoked")
			},
		})
	}
	rows = append(rows, badRow{
		name: "after Close/Complete on a superseded lease",
		prep: badCloseNow,
		run: func(t *testing.T, fx *badFx) {
			badLost(t, fx.s1.Complete(), fx.s1, fx.cur.Token, "superseded")
		},
	})
	return rows
}

// ---------------------------------------------------------------------------
// Lease methods: nil, zero, forged, stale, and bad arguments on a valid one

func badLeaseRows() []badRow {
	var rows []badRow
	nilLike := []struct {
		name string
		l    func(fx *badFx) *lease
	}{
		{"nil *Lease", func(*badFx) *lease { return nil }},
		{"zero Lease{}", func(*badFx) *lease { return &lease{} }},
		{"forged Lease with the current token", func(fx *badFx) *lease {
			return &lease{JobID: fx.l.JobID, Token: fx.l.Token, Attempt: fx.l.Attempt, WorkerID: fx.l.WorkerID}
		}},
	}
	for _, nl := range nilLike {
		rows = append(rows, badRow{name: nl.name + "/Expiry is the zero Time", run: func(t *testing.T, fx *badFx) {
			require.True(t, nl.l(fx).Expiry().IsZero())
		}})
		for _, op := range badLeaseOps {
			rows = append(rows, badRow{name: nl.name + "/" + op.name, run: func(t *testing.T, fx *badFx) {
				require.ErrorIs(t, op.op(nl.l(fx)), leaserouter.ErrLeaseLost)
			}})
		}
	}
	ended := []struct {
		name, reason string
		l            func(fx *badFx) *lease
		current      func(fx *badFx) leaserouter.Token
	}{
		{"superseded lease", "superseded", func(fx *badFx) *lease { return fx.s1 }, func(fx *badFx) leaserouter.Token { return fx.cur.Token }},
		{"completed lease", "completed", func(fx *badFx) *lease { return fx.dl }, func(fx *badFx) leaserouter.Token { return fx.dl.Token }},
		{"failed lease", "failed", func(fx *badFx) *lease { return fx.fl }, func(fx *badFx) leaserouter.Token { return fx.fl.Token }},
		{"canceled lease", "canceled", func(fx *badFx) *lease { return fx.cl }, func(fx *badFx) leaserouter.Token { return fx.cl.Token }},
	}
	for _, e := range ended {
		rows = append(rows, badRow{name: e.name + "/Expiry is its last expiry", run: func(t *testing.T, fx *badFx) {
			// Every fixture lease was granted at 1s past New, the current
			// instant, and never extended.
			requireTime(t, time.Now().Add(ld), e.l(fx).Expiry(), "last expiry")
		}})
		for _, op := range badLeaseOps {
			rows = append(rows, badRow{
				name: e.name + "/" + op.name,
				run: func(t *testing.T, fx *badFx) {
					l := e.l(fx)
					badLost(t, op.op(l), l, e.current(fx), e.reason)
					badRejected(t, fx, l)
				},
				stats: staleStats(op.heartbeat),
				// The fixture's leases are all on distinct jobs; the event names l's job.
				events: []string{"stale_rejected:" + map[string]string{
					"superseded": "stale", "completed": "done", "failed": "dead", "canceled": "canceled",
				}[e.reason]},
			})
		}
	}
	extended := func(s *leaserouter.Stats) { s.Heartbeats++ }
	rows = append(rows,
		badRow{
			name: "Heartbeat/nil progress keeps the checkpoint",
			run: func(t *testing.T, fx *badFx) {
				sleep(time.Second)
				require.NoError(t, fx.l.Heartbeat(nil))
				j := get(t, fx.r, "leased")
				require.Equal(t, []byte("cp"), j.Progress)
				requireTime(t, time.Now().Add(ld), j.LeaseExpiry, "extended")
				requireTime(t, j.LeaseExpiry, fx.l.Expiry(), "Lease.Expiry")
				require.Equal(t, fx.l.Token, j.Token, "a heartbeat never changes the token")
			},
			touched: []string{"leased"}, stats: extended, events: []string{"lease_extended:leased"},
		},
		badRow{
			name: "Heartbeat/empty progress clears the checkpoint",
			run: func(t *testing.T, fx *badFx) {
				require.NoError(t, fx.l.Heartbeat([]byte{}))
				j := get(t, fx.r, "leased")
				require.Empty(t, j.Progress)
				require.Equal(t, leaserouter.StateLeased, j.State)
			},
			touched: []string{"leased"}, stats: extended, events: []string{"lease_extended:leased"},
		},
		badRow{
			name: "Heartbeat/16 MiB progress is stored as a copy",
			run: func(t *testing.T, fx *badFx) {
				p := bytes.Repeat([]byte{7}, 16<<20)
				require.NoError(t, fx.l.Heartbeat(p))
				p[0], p[len(p)-1] = 0, 0
				got := get(t, fx.r, "leased").Progress
				require.Len(t, got, 16<<20)
				require.True(t, got[0] == 7 && got[len(got)-1] == 7, "the caller's later writes must not reach the checkpoint")
				got[1] = 0
				require.Equal(t, byte(7), get(t, fx.r, "leased").Progress[1], "Get returns a copy")
			},
			touched: []string{"leased"}, stats: extended, events: []string{"lease_extended:leased"},
		},
		badRow{
			name: "Fail/nil cause retries with LastError unknown error",
			run: func(t *testing.T, fx *badFx) {
				require.NoError(t, fx.l.Fail(nil))
				j := get(t, fx.r, "leased")
				require.Equal(t, leaserouter.StateScheduled, j.State)
				require.Equal(t, "unknown error", j.LastError)
				requireTime(t, time.Now().Add(time.Hour), j.RunAt, "Backoff 1h")
				require.Empty(t, j.Owner)
				require.Equal(t, []byte("cp"), j.Progress)
			},
			touched: []string{"leased"},
			stats:   func(s *leaserouter.Stats) { s.Retries++; s.Leased--; s.Scheduled++ },
			events:  []string{"failed:leased", "retry_scheduled:leased"},
		},
		badRow{
			name: "Fail/Permanent(nil) is nil, so a plain retry",
			run: func(t *testing.T, fx *badFx) {
				cause := leaserouter.Permanent(nil)
				require.NoError(t, cause)
				require.NoError(t, fx.l.Fail(cause))
				j := get(t, fx.r, "leased")
				require.Equal(t, leaserouter.StateScheduled, j.State)
				require.Equal(t, "unknown error", j.LastError)
			},
			touched: []string{"leased"},
			stats:   func(s *leaserouter.Stats) { s.Retries++; s.Leased--; s.Scheduled++ },
			events:  []string{"failed:leased", "retry_scheduled:leased"},
		},
		badRow{
			name: "Fail/wrapped Permanent fails the job for good",
			run: func(t *testing.T, fx *badFx) {
				bad := errors.New("bad")
				require.NoError(t, fx.l.Fail(fmt.Errorf("wrapped: %w", leaserouter.Permanent(bad))))
				j := get(t, fx.r, "leased")
				require.Equal(t, leaserouter.StateDead, j.State)
				require.Equal(t, "wrapped: bad", j.LastError)
				require.Less(t, j.Attempt, j.MaxAttempts, "attempts were left")
				synctest.Wait() // events are delivered by the router's own goroutine
				e := fx.rec.last(t, "leased")
				require.Equal(t, leaserouter.EventDead, e.Kind)
			},
			touched: []string{"leased"},
			stats:   func(s *leaserouter.Stats) { s.Dead++; s.Leased--; s.DeadJobs++; s.Failed++ },
			events:  []string{"failed:leased", "dead:leased"},
		},
	)
	return rows
}

// ---------------------------------------------------------------------------
// Run

func badRunInvalid(name string, opts leaserouter.WorkerOptions, h leaserouter.Handler[string], contains string) badRow {
	return badRow{name: "Run/" + name, run: func(t *testing.T, fx *badFx) {
		err := fx.r.Run(context.Background(), opts, h)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		require.ErrorContains(t, err, contains)
	}}
}

func badRunRows() []badRow {
	var calls atomic.Int32
	counting := func(context.Context, *lease) error { calls.Add(1); return nil }
	huge := time.Duration(math.MaxInt64)
	return []badRow{
		badRunInvalid("nil handler", leaserouter.WorkerOptions{}, nil, "Handler"),
		badRunInvalid("Workers -1", leaserouter.WorkerOptions{Workers: -1}, badNop, "Workers"),
		badRunInvalid("Workers MinInt", leaserouter.WorkerOptions{Workers: math.MinInt}, badNop, "Workers"),
		badRunInvalid("Workers MaxWorkers+1", leaserouter.WorkerOptions{Workers: leaserouter.MaxWorkers + 1}, badNop, "Workers"),
		badRunInvalid("Workers 1<<40", leaserouter.WorkerOptions{Workers: 1 << 40}, badNop, "Workers"),
		badRunInvalid("Workers MaxInt", leaserouter.WorkerOptions{Workers: math.MaxInt}, badNop, "Workers"),
		badRunInvalid("Batch -1", leaserouter.WorkerOptions{Batch: -1}, badNop, "Batch"),
		badRunInvalid("Batch MinInt", leaserouter.WorkerOptions{Batch: math.MinInt}, badNop, "Batch"),
		badRunInvalid("Batch MaxBatch+1", leaserouter.WorkerOptions{Batch: leaserouter.MaxBatch + 1}, badNop, "Batch"),
		badRunInvalid("Batch MaxInt", leaserouter.WorkerOptions{Batch: math.MaxInt}, badNop, "Batch"),
		badRunInvalid("Timeout -1ns", leaserouter.WorkerOptions{Timeout: -1}, badNop, "Timeout"),
		badRunInvalid("Timeout MinInt64", leaserouter.WorkerOptions{Timeout: math.MinInt64}, badNop, "Timeout"),
		badRunInvalid("HeartbeatInterval -1ns", leaserouter.WorkerOptions{HeartbeatInterval: -1}, badNop, "HeartbeatInterval"),
		badRunInvalid("HeartbeatInterval MinInt64", leaserouter.WorkerOptions{HeartbeatInterval: math.MinInt64}, badNop, "HeartbeatInterval"),
		badRunInvalid("HeartbeatInterval == LeaseDuration", leaserouter.WorkerOptions{HeartbeatInterval: ld}, badNop, "HeartbeatInterval"),
		badRunInvalid("HeartbeatInterval MaxInt64", leaserouter.WorkerOptions{HeartbeatInterval: huge}, badNop, "HeartbeatInterval"),
		{name: "Run/canceled ctx returns nil and takes no job", run: func(t *testing.T, fx *badFx) {
			calls.Store(0)
			require.NoError(t, fx.r.Run(badCancelled(), leaserouter.WorkerOptions{Workers: 2}, counting))
			require.Zero(t, calls.Load())
		}},
		{name: "Run/LeaseDuration 1ns: the default HeartbeatInterval is not < LeaseDuration", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{LeaseDuration: time.Nanosecond})
			// The default, LeaseDuration/3, rounds up to 1ns = LeaseDuration:
			// heartbeats could never keep a lease, which the contract calls
			// bad input (KeepAlive refuses the same interval).
			err := r.Run(badCancelled(), leaserouter.WorkerOptions{}, badNop)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions,
				"Run must refuse an effective HeartbeatInterval (1ns) >= LeaseDuration (1ns)")
		}},
		{
			name: "Run/nil ctx runs until Close",
			run: func(t *testing.T, fx *badFx) {
				release := make(chan struct{})
				h := func(ctx context.Context, l *lease) error { <-release; return nil }
				ran := goRun(nilCtx, fx.r, leaserouter.WorkerOptions{Workers: 1, WorkerID: "bad"}, h)
				synctest.Wait()
				j := get(t, fx.r, "pending")
				require.Equal(t, leaserouter.StateLeased, j.State)
				require.Equal(t, "bad-0", j.Owner)
				close(release)
				synctest.Wait()
				require.Equal(t, leaserouter.StateSucceeded, get(t, fx.r, "pending").State)
				requireBlocked(t, ran)
				badCloseNow(t, fx)
				synctest.Wait()
				require.NoError(t, receive(t, ran))
			},
			touched: []string{"pending", "stale", "leased"},
			stats: func(s *leaserouter.Stats) {
				s.LeasesGranted++
				s.Succeeded++
				s.Pending++ // -1 pending succeeded, +2 revoked
				s.Leased -= 2
			},
			events: []string{"lease_acquired:pending", "completed:pending", "released:stale", "released:leased"},
		},
	}
}

// ---------------------------------------------------------------------------
// KeepAlive

func badKeepAliveRows() []badRow {
	invalid := func(name string, l func(fx *badFx) *lease, interval time.Duration) badRow {
		return badRow{name: "KeepAlive/" + name, run: func(t *testing.T, fx *badFx) {
			ctx, cancel := leaserouter.KeepAlive(context.Background(), l(fx), interval)
			require.NotNil(t, cancel)
			defer cancel()
			require.ErrorIs(t, ctx.Err(), context.Canceled, "canceled at once")
			require.ErrorIs(t, context.Cause(ctx), leaserouter.ErrInvalidOptions)
			cancel()
			cancel() // idempotent
		}}
	}
	beat := func(s *leaserouter.Stats) { s.Heartbeats++ }
	defaultInterval := func(name string, interval time.Duration) badRow {
		return badRow{
			name: "KeepAlive/" + name + " means LeaseDuration/3",
			run: func(t *testing.T, fx *badFx) {
				ctx, cancel := leaserouter.KeepAlive(context.Background(), fx.l, interval)
				defer cancel()
				exp := fx.l.Expiry()
				sleep(ld/3 - time.Nanosecond)
				requireTime(t, exp, fx.l.Expiry(), "no heartbeat before LeaseDuration/3")
				sleep(time.Nanosecond)
				requireTime(t, time.Now().Add(ld), fx.l.Expiry(), "a heartbeat at LeaseDuration/3")
				require.NoError(t, ctx.Err())
			},
			touched: []string{"leased"}, stats: beat, events: []string{"lease_extended:leased"},
		}
	}
	return []badRow{
		{
			name: "KeepAlive/nil ctx heartbeats until cancel, which does not end the lease",
			run: func(t *testing.T, fx *badFx) {
				ctx, cancel := leaserouter.KeepAlive(nilCtx, fx.l, 0)
				defer cancel()
				sleep(ld / 3)
				require.NoError(t, ctx.Err())
				requireTime(t, time.Now().Add(ld), get(t, fx.r, "leased").LeaseExpiry, "heartbeat at ld/3")
				cancel()
				require.ErrorIs(t, context.Cause(ctx), context.Canceled)
				require.Equal(t, leaserouter.StateLeased, get(t, fx.r, "leased").State)
			},
			touched: []string{"leased"}, stats: beat, events: []string{"lease_extended:leased"},
		},
		defaultInterval("interval 0", 0),
		defaultInterval("interval -1ns", -1),
		defaultInterval("interval MinInt64", math.MinInt64),
		invalid("nil lease", func(*badFx) *lease { return nil }, time.Second),
		invalid("zero Lease{}", func(*badFx) *lease { return &lease{} }, time.Second),
		invalid("interval == LeaseDuration", func(fx *badFx) *lease { return fx.l }, ld),
		invalid("interval MaxInt64", func(fx *badFx) *lease { return fx.l }, math.MaxInt64),
		{name: "KeepAlive/superseded lease", run: func(t *testing.T, fx *badFx) {
			ctx, cancel := leaserouter.KeepAlive(context.Background(), fx.s1, time.Second)
			defer cancel()
			require.Error(t, ctx.Err(), "canceled at once")
			badLost(t, context.Cause(ctx), fx.s1, fx.cur.Token, "superseded")
		}},
		{name: "KeepAlive/canceled parent ctx does not heartbeat", run: func(t *testing.T, fx *badFx) {
			ctx, cancel := leaserouter.KeepAlive(badCancelled(), fx.l, time.Second)
			defer cancel()
			require.ErrorIs(t, ctx.Err(), context.Canceled)
			sleep(time.Second)
			requireTime(t, time.Now().Add(ld-time.Second), fx.l.Expiry(), "no heartbeat")
		}},
	}
}

// ---------------------------------------------------------------------------
// Fence

func badFenceRows() []badRow {
	fence := func(name string, run func(t *testing.T, f *leaserouter.Fence)) badRow {
		return badRow{name: "Fence/" + name, own: true, run: func(t *testing.T, _ *badFx) {
			var f leaserouter.Fence
			run(t, &f)
		}}
	}
	stale := func(t *testing.T, err error, key string, tok, highest leaserouter.Token) {
		t.Helper()
		require.ErrorIs(t, err, leaserouter.ErrStaleToken)
		var p *leaserouter.StaleTokenError
		require.ErrorAs(t, err, &p)
		require.Equal(t, leaserouter.StaleTokenError{Key: key, Token: tok, Highest: highest}, *p)
		var v leaserouter.StaleTokenError
		require.ErrorAs(t, err, &v)
		require.Equal(t, *p, v)
	}
	never := func() error { panic("write must not run") }
	return []badRow{
		{name: "Fence/nil *Fence", own: true, run: func(t *testing.T, _ *badFx) {
			var f *leaserouter.Fence
			require.ErrorIs(t, f.Admit("k", 1), leaserouter.ErrInvalidOptions)
			require.ErrorIs(t, f.Do("k", 1, never), leaserouter.ErrInvalidOptions)
			require.ErrorIs(t, f.Do("k", 1, nil), leaserouter.ErrInvalidOptions)
			f.Forget("k")
		}},
		fence("zero value admits token 0 on a fresh key", func(t *testing.T, f *leaserouter.Fence) {
			require.NoError(t, f.Admit("k", 0))
			require.NoError(t, f.Admit("k", 0), "equal to the highest is admitted")
			require.NoError(t, f.Admit("k", 1))
			stale(t, f.Admit("k", 0), "k", 0, 1)
		}),
		fence("empty key is a key like any other", func(t *testing.T, f *leaserouter.Fence) {
			require.NoError(t, f.Admit("", 5))
			stale(t, f.Admit("", 4), "", 4, 5)
			require.NoError(t, f.Admit("x", 4), "keys are independent")
		}),
		fence("token MaxUint64", func(t *testing.T, f *leaserouter.Fence) {
			require.NoError(t, f.Admit("k", math.MaxUint64))
			require.NoError(t, f.Admit("k", math.MaxUint64))
			stale(t, f.Admit("k", math.MaxInt64), "k", math.MaxInt64, math.MaxUint64)
			stale(t, f.Do("k", math.MaxUint64-1, never), "k", math.MaxUint64-1, math.MaxUint64)
		}),
		fence("Do with token 0 on a fresh key writes", func(t *testing.T, f *leaserouter.Fence) {
			wrote := false
			require.NoError(t, f.Do("k", 0, func() error { wrote = true; return nil }))
			require.True(t, wrote)
		}),
		fence("Do with a nil write records nothing", func(t *testing.T, f *leaserouter.Fence) {
			require.NoError(t, f.Admit("k", 5))
			require.ErrorIs(t, f.Do("k", 10, nil), leaserouter.ErrInvalidOptions)
			require.ErrorIs(t, f.Do("fresh", 10, nil), leaserouter.ErrInvalidOptions)
			require.NoError(t, f.Admit("k", 6), "10 was not recorded")
			stale(t, f.Admit("k", 5), "k", 5, 6)
			require.NoError(t, f.Admit("fresh", 1), "10 was not recorded on a fresh key")
		}),
		fence("Do returns write's error unchanged and still fences", func(t *testing.T, f *leaserouter.Fence) {
			werr := errors.New("write failed")
			require.Same(t, werr, f.Do("k", 7, func() error { return werr }))
			stale(t, f.Admit("k", 6), "k", 6, 7)
		}),
		fence("Do with a stale token does not write", func(t *testing.T, f *leaserouter.Fence) {
			require.NoError(t, f.Admit("k", 7))
			stale(t, f.Do("k", 6, never), "k", 6, 7)
		}),
		fence("Forget of an unknown key on a zero Fence", func(t *testing.T, f *leaserouter.Fence) {
			f.Forget("unknown")
			f.Forget("")
			require.NoError(t, f.Admit("unknown", 0))
		}),
		fence("Forget resets a key only", func(t *testing.T, f *leaserouter.Fence) {
			require.NoError(t, f.Admit("k", 9))
			require.NoError(t, f.Admit("other", 9))
			f.Forget("k")
			f.Forget("k")
			require.NoError(t, f.Admit("k", 1))
			stale(t, f.Admit("other", 1), "other", 1, 9)
		}),
	}
}

// ---------------------------------------------------------------------------
// Plain values: State, EventKind, DefaultBackoff, Permanent, error types

func badValueRows() []badRow {
	value := func(name string, run func(t *testing.T)) badRow {
		return badRow{name: name, own: true, run: func(t *testing.T, _ *badFx) { run(t) }}
	}
	inRange := func(t *testing.T, attempt int, lo, hi time.Duration) {
		t.Helper()
		for range 200 {
			d := leaserouter.DefaultBackoff(attempt)
			require.True(t, d >= lo && d < hi, "DefaultBackoff(%d) = %v, want [%v, %v)", attempt, d, lo, hi)
		}
	}
	return []badRow{
		value("State/out of range", func(t *testing.T) {
			for _, s := range []leaserouter.State{6, 7, 255} {
				require.Equal(t, fmt.Sprintf("State(%d)", s), s.String())
				require.False(t, s.Terminal())
			}
		}),
		value("EventKind/out of range", func(t *testing.T) {
			for _, k := range []leaserouter.EventKind{0, 16, 255} {
				require.Equal(t, fmt.Sprintf("EventKind(%d)", k), k.String())
			}
		}),
		value("DefaultBackoff/attempt 0, -1, MinInt count as 1", func(t *testing.T) {
			for _, a := range []int{0, -1, math.MinInt} {
				inRange(t, a, time.Second/2, time.Second)
			}
		}),
		value("DefaultBackoff/attempt 10, 64, MaxInt are capped", func(t *testing.T) {
			for _, a := range []int{10, 64, math.MaxInt} {
				inRange(t, a, 150*time.Second, 5*time.Minute)
			}
		}),
		value("Permanent/nil and nested", func(t *testing.T) {
			require.NoError(t, leaserouter.Permanent(nil))
			base := errors.New("base")
			p := leaserouter.Permanent(leaserouter.Permanent(base))
			require.ErrorIs(t, p, base)
			require.Equal(t, "base", p.Error())
		}),
		value("LeaseLostError/zero value", func(t *testing.T) {
			var e leaserouter.LeaseLostError
			require.True(t, strings.HasPrefix(e.Error(), "leaserouter:"), e.Error())
			require.ErrorIs(t, e, leaserouter.ErrLeaseLost)
			require.ErrorIs(t, &e, leaserouter.ErrLeaseLost)
			require.False(t, e.Is(nil))
			require.False(t, e.Is(leaserouter.ErrStaleToken))
			require.False(t, (&e).As(nil))
			require.False(t, (&e).As(&leaserouter.StaleTokenError{}))
		}),
		value("StaleTokenError/zero value", func(t *testing.T) {
			var e leaserouter.StaleTokenError
			require.True(t, strings.HasPrefix(e.Error(), "leaserouter:"), e.Error())
			require.ErrorIs(t, e, leaserouter.ErrStaleToken)
			require.ErrorIs(t, &e, leaserouter.ErrStaleToken)
			require.False(t, e.Is(nil))
			require.False(t, e.Is(leaserouter.ErrLeaseLost))
			require.False(t, (&e).As(nil))
			require.False(t, (&e).As(&leaserouter.LeaseLostError{}))
		}),
	}
}

// ---------------------------------------------------------------------------
// IDs: one rule for job IDs and worker IDs on every backend (valid UTF-8,
// no NUL, at most MaxIDBytes bytes; a job ID is not empty). pgrouter's
// badinput_test.go holds the same table and checks pgrouter's errors equal
// these.

// badNames break the rule; problem is what the error must say of each.
var badNames = []struct{ name, id, problem string }{
	{"NUL", "a\x00b", "NUL at byte 1"},
	{"NUL alone", "\x00", "NUL at byte 0"},
	{"invalid UTF-8", "ab\xffc", "not valid UTF-8 at byte 2"},
	{"truncated rune", "ok\xe2\x82", "not valid UTF-8 at byte 2"},
	{"UTF-16 surrogate", "\xed\xa0\x80", "not valid UTF-8 at byte 0"},
	{"MaxIDBytes+1", strings.Repeat("x", leaserouter.MaxIDBytes+1), fmt.Sprintf("is %d bytes", leaserouter.MaxIDBytes+1)},
	{"MaxIDBytes+1 in 2-byte runes", strings.Repeat("é", leaserouter.MaxIDBytes/2) + "x", fmt.Sprintf("is %d bytes", leaserouter.MaxIDBytes+1)},
	{"1 MiB", strings.Repeat("x", 1<<20), "is 1048576 bytes"},
}

// goodNames keep the rule at its edges.
var goodNames = []struct{ name, id string }{
	{"MaxIDBytes of ASCII", strings.Repeat("x", leaserouter.MaxIDBytes)},
	{"MaxIDBytes of 4-byte runes", strings.Repeat("😀", leaserouter.MaxIDBytes/4)},
	{"control characters but NUL", "\x01\t\x7f"},
}

func badNameRows() []badRow {
	var rows []badRow
	for _, n := range badNames {
		rows = append(rows,
			badEnqueueInvalid("ID "+n.name+" is ErrInvalidJob naming the problem", n.problem, n.id),
			badRow{name: "EnqueueMany/ID " + n.name + " is ErrInvalidJob naming the problem and the index", run: func(t *testing.T, fx *badFx) {
				dups, err := fx.r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "new"}, {ID: "new2"}, {ID: n.id}})
				require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
				require.ErrorContains(t, err, n.problem)
				require.ErrorContains(t, err, "batch index 2")
				require.Nil(t, dups)
				requireGone(t, fx.r, "new")
				requireGone(t, fx.r, "new2")
			}},
			badRow{name: "Get/ID " + n.name + " is not found", run: func(t *testing.T, fx *badFx) {
				j, ok := fx.r.Get(n.id)
				require.False(t, ok)
				require.Equal(t, job{}, j)
			}},
			badRow{name: "Cancel/ID " + n.name + " is ErrNotFound and ErrInvalidJob", run: func(t *testing.T, fx *badFx) {
				err := fx.r.Cancel(n.id)
				require.ErrorIs(t, err, leaserouter.ErrNotFound)
				require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
				require.ErrorContains(t, err, n.problem)
			}},
			badRow{name: "Acquire/workerID " + n.name + " is ErrInvalidOptions and takes no job", run: func(t *testing.T, fx *badFx) {
				for call, acq := range map[string]func() (int, error){
					"TryAcquire": func() (int, error) { l, err := fx.r.TryAcquire(n.id); return badCount(l), err },
					"Acquire":    func() (int, error) { l, err := fx.r.Acquire(context.Background(), n.id); return badCount(l), err },
					"TryAcquireMany": func() (int, error) {
						ls, err := fx.r.TryAcquireMany(n.id, 2)
						return len(ls), err
					},
					"AcquireMany": func() (int, error) {
						ls, err := fx.r.AcquireMany(context.Background(), n.id, 2)
						return len(ls), err
					},
				} {
					got, err := acq()
					require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, call)
					require.ErrorContains(t, err, "worker ID", call)
					require.ErrorContains(t, err, n.problem, call)
					require.Zero(t, got, call)
				}
			}},
			badRunWorkerID("WorkerID "+n.name, leaserouter.WorkerOptions{WorkerID: n.id}),
		)
	}
	for _, n := range goodNames {
		rows = append(rows,
			badRow{
				name: "Enqueue/ID " + n.name + " is accepted",
				run: func(t *testing.T, fx *badFx) {
					require.NoError(t, fx.r.Enqueue(n.id, "p"))
					require.Equal(t, n.id, get(t, fx.r, n.id).ID)
					require.NoError(t, fx.r.Cancel(n.id))
				},
				stats:  func(s *leaserouter.Stats) { s.Enqueued++; s.Canceled++ },
				events: []string{badEv("enqueued", n.id), badEv("canceled", n.id)},
			},
			badRow{
				name: "EnqueueMany/ID " + n.name + " is accepted",
				run: func(t *testing.T, fx *badFx) {
					dups, err := fx.r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "new"}, {ID: n.id}})
					require.NoError(t, err)
					require.Nil(t, dups)
					require.Equal(t, n.id, get(t, fx.r, n.id).ID)
				},
				stats:  func(s *leaserouter.Stats) { s.Enqueued += 2; s.Pending += 2 },
				events: []string{"enqueued:new", badEv("enqueued", n.id)},
			},
			badRow{
				name: "TryAcquire/workerID " + n.name + " is accepted",
				run: func(t *testing.T, fx *badFx) {
					l := acquire(t, fx.r, n.id)
					require.Equal(t, n.id, l.WorkerID)
					require.Equal(t, n.id, get(t, fx.r, "pending").Owner)
				},
				touched: []string{"pending"},
				stats:   func(s *leaserouter.Stats) { s.LeasesGranted++; s.Pending--; s.Leased++ },
				events:  []string{"lease_acquired:pending"},
			},
		)
	}
	// Run's worker IDs are "<WorkerID>-<i>": each must keep the rule.
	edge := strings.Repeat("w", leaserouter.MaxIDBytes-2) // "<edge>-0" is MaxIDBytes
	rows = append(rows,
		badRunWorkerID("WorkerID making worker IDs of MaxIDBytes+1", leaserouter.WorkerOptions{WorkerID: edge + "w", Workers: 1}),
		badRunWorkerID("WorkerID making the 11th worker ID MaxIDBytes+1", leaserouter.WorkerOptions{WorkerID: edge, Workers: 11}),
		badRow{
			name: "Run/WorkerID making worker IDs of exactly MaxIDBytes",
			run: func(t *testing.T, fx *badFx) {
				ran := goRun(context.Background(), fx.r, leaserouter.WorkerOptions{WorkerID: edge, Workers: 10}, badNop)
				synctest.Wait()
				requireBlocked(t, ran)
				require.Equal(t, leaserouter.StateSucceeded, get(t, fx.r, "pending").State)
				badCloseNow(t, fx)
				synctest.Wait()
				require.NoError(t, receive(t, ran))
			},
			touched: []string{"pending", "stale", "leased"},
			stats: func(s *leaserouter.Stats) {
				s.LeasesGranted++
				s.Succeeded++
				s.Pending++ // -1 pending succeeded, +2 revoked
				s.Leased -= 2
			},
			events: []string{"lease_acquired:pending", "completed:pending", "released:stale", "released:leased"},
		},
	)
	return rows
}

// badRunWorkerID is a row whose Run is refused for opts.WorkerID. Its ctx
// is done: were opts accepted, Run would return nil at once.
func badRunWorkerID(name string, opts leaserouter.WorkerOptions) badRow {
	return badRow{name: "Run/" + name, run: func(t *testing.T, fx *badFx) {
		err := fx.r.Run(badCancelled(), opts, badNop)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		require.ErrorContains(t, err, "WorkerID")
	}}
}

// badCount is 1 for a lease, 0 for nil.
func badCount(l *lease) int {
	if l == nil {
		return 0
	}
	return 1
}
