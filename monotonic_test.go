package leaserouter_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestMonotonicLeaseExpiry runs on the real clock, outside any synctest
// bubble, with a 50ms lease. It checks the visible side of the rule "Time is
// Go's monotonic clock", which is what keeps a wall-clock step from expiring
// or extending a lease.
//
// What it proves:
//   - The router's clock is a monotonic reading taken at New. Every time it
//     reports (Lease.Expiry, Job.LeaseExpiry, Job.RunAt, Job.CreatedAt,
//     Event.Time) carries a monotonic reading ("m=+" in String). Round(0)
//     strips that reading, and the String changes.
//   - A lease's expiry is the grant instant plus LeaseDuration on the
//     monotonic clock. It falls between two time.Now readings taken just
//     before and just after the grant (time.Time.Sub and Before use the
//     monotonic readings when both times have one). A heartbeat's new
//     expiry falls the same way.
//   - Lease validity follows elapsed monotonic time. A blocked Acquire gets
//     the job back no earlier than the old lease's monotonic expiry. Once a
//     runtime timer, which runs on the monotonic clock, has fired at the
//     expiry, the lease is refused as "expired". Each accepted or refused
//     heartbeat is checked against the monotonic readings around it.
//   - A wall-clock-only input is converted once, at Enqueue, into the
//     router's monotonic clock. WithRunAt with a time that has no monotonic
//     reading (Round(0)) gives a Job.RunAt that equals it and now carries
//     one. A job scheduled 50ms ahead that way becomes ready no earlier than
//     that monotonic run-at.
//
// What it cannot prove: a test cannot step the system clock, and no public
// API gives a time whose wall and monotonic readings disagree. So it never
// sees a wall-clock jump. It checks that everything a jump could act on is
// held as monotonic time, and that the router's decisions agree with the
// monotonic clock. A core that read time.Now().Round(0), or kept deadlines as
// wall-clock times, would fail the "m=+" assertions. It also proves nothing
// about timing precision: all bounds are orderings, never durations.
func TestMonotonicLeaseExpiry(t *testing.T) {
	const leaseDur = 50 * time.Millisecond
	var mu sync.Mutex
	var expired []leaserouter.Event
	expiredSeen := make(chan struct{}, 8)
	r, err := leaserouter.New[string](leaserouter.Options{
		LeaseDuration: leaseDur,
		OnEvent: func(e leaserouter.Event) {
			if e.Kind == leaserouter.EventLeaseExpired {
				mu.Lock()
				expired = append(expired, e)
				mu.Unlock()
				expiredSeen <- struct{}{}
			}
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, r.Close(context.Background()))
		require.NoError(t, r.Audit())
	})
	// Bounds a wait for something that takes 50ms: it fails a broken
	// router, not a slow machine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The grant: expiry = grant instant + LeaseDuration, on the monotonic clock.
	require.NoError(t, r.Enqueue("a", ""))
	before := time.Now()
	l, err := r.TryAcquire("w")
	after := time.Now()
	require.NoError(t, err)
	exp := l.Expiry()
	monoRequire(t, exp, "Lease.Expiry")
	require.False(t, exp.Before(before.Add(leaseDur)), "expiry %v is before grant+LeaseDuration (monotonic)", exp)
	require.False(t, exp.After(after.Add(leaseDur)), "expiry %v is after grant+LeaseDuration (monotonic)", exp)
	j := get(t, r, "a")
	monoRequire(t, j.LeaseExpiry, "Job.LeaseExpiry")
	monoRequire(t, j.CreatedAt, "Job.CreatedAt")
	require.True(t, j.LeaseExpiry.Equal(exp), "Job.LeaseExpiry %v, Lease.Expiry %v", j.LeaseExpiry, exp)

	// A blocked Acquire gets the job back only once the lease's monotonic
	// expiry has passed: the reaper's timer and the router's clock agree with
	// time.Now's monotonic reading.
	l2, err := r.Acquire(ctx, "w2")
	back := time.Now()
	require.NoError(t, err, "the 50ms lease never expired")
	require.Equal(t, "a", l2.JobID)
	require.Equal(t, 2, l2.Attempt)
	require.False(t, back.Before(exp), "job re-granted at %v, before its lease's expiry %v", back, exp)
	lost := requireLost(t, l.Heartbeat(nil), l.Token, l2.Token)
	require.Equal(t, leaserouter.LostSuperseded, lost.Reason)
	select { // events are delivered by the router's own goroutine
	case <-expiredSeen:
	case <-ctx.Done():
		t.Fatal("lease_expired never delivered")
	}
	mu.Lock()
	require.Len(t, expired, 1)
	require.True(t, expired[0].Time.Equal(exp), "lease_expired at %v, expiry %v", expired[0].Time, exp)
	monoRequire(t, expired[0].Time, "Event.Time")
	mu.Unlock()

	// A heartbeat is accepted only before the expiry, and then extends to
	// now+LeaseDuration. On a loaded machine 50ms may already have passed:
	// both outcomes are checked against the monotonic readings around the call.
	exp2 := l2.Expiry()
	before = time.Now()
	err = l2.Heartbeat(nil)
	after = time.Now()
	if err == nil {
		require.True(t, before.Before(exp2), "heartbeat accepted at %v, after expiry %v", before, exp2)
		e := l2.Expiry()
		monoRequire(t, e, "Lease.Expiry after Heartbeat")
		require.False(t, e.Before(before.Add(leaseDur)), "extended expiry %v before call+LeaseDuration", e)
		require.False(t, e.After(after.Add(leaseDur)), "extended expiry %v after call+LeaseDuration", e)
		exp2 = e
	} else {
		lost = requireLost(t, err, l2.Token, l2.Token)
		require.Equal(t, leaserouter.LostExpired, lost.Reason)
		require.False(t, after.Before(exp2), "heartbeat refused as expired at %v, before expiry %v", after, exp2)
	}

	// Once a monotonic timer has fired at the expiry, the lease is lost.
	// No sleep: a bounded wait on the timer's channel.
	select {
	case <-time.After(time.Until(exp2)):
	case <-ctx.Done():
		t.Fatal("timer for a 50ms lease never fired")
	}
	require.False(t, time.Now().Before(exp2), "the timer fired before the expiry")
	lost = requireLost(t, l2.Heartbeat(nil), l2.Token, l2.Token)
	require.Equal(t, leaserouter.LostExpired, lost.Reason)
	require.Equal(t, leaserouter.StatePending, get(t, r, "a").State, "settled as the reaper would")
	require.NoError(t, r.Cancel("a")) // out of the way of the scheduled jobs below

	// A wall-clock-only run-at is converted once, at Enqueue, into the
	// router's monotonic clock.
	far := time.Now().Round(0).Add(1000 * time.Hour)
	require.NotContains(t, far.String(), "m=", "Round(0) strips the monotonic reading")
	require.NoError(t, r.Enqueue("far", "", leaserouter.WithRunAt(far)))
	jf := get(t, r, "far")
	require.Equal(t, leaserouter.StateScheduled, jf.State)
	require.True(t, jf.RunAt.Equal(far), "RunAt %v, asked %v", jf.RunAt, far)
	monoRequire(t, jf.RunAt, "Job.RunAt of a wall-clock-only WithRunAt")

	past := time.Now().Round(0).Add(-1000 * time.Hour)
	require.NoError(t, r.Enqueue("past", "", leaserouter.WithRunAt(past)))
	require.Equal(t, leaserouter.StatePending, get(t, r, "past").State)
	require.NoError(t, r.Cancel("past"))

	soon := time.Now().Round(0).Add(leaseDur)
	require.NoError(t, r.Enqueue("soon", "", leaserouter.WithRunAt(soon)))
	js := get(t, r, "soon")
	monoRequire(t, js.RunAt, "Job.RunAt of a near wall-clock-only WithRunAt")
	ls, err := r.Acquire(ctx, "w3")
	got := time.Now()
	require.NoError(t, err, "the job scheduled 50ms ahead never became ready")
	require.Equal(t, "soon", ls.JobID)
	require.False(t, got.Before(js.RunAt), "leased at %v, before its monotonic run-at %v", got, js.RunAt)
	// On a loaded machine the 50ms lease may have passed already: a
	// refusal must then be an expiry, after the expiry.
	if err := ls.Complete(); err != nil {
		lost = requireLost(t, err, ls.Token, ls.Token)
		require.Equal(t, leaserouter.LostExpired, lost.Reason)
		require.False(t, time.Now().Before(ls.Expiry()), "completion refused as expired before expiry %v", ls.Expiry())
	}
}

// monoRequire checks that tm carries a monotonic clock reading: its String
// ends in "m=+..." (the router's readings are after process start), and
// stripping it with Round(0) changes the String but not the instant.
func monoRequire(t *testing.T, tm time.Time, what string) {
	t.Helper()
	s := tm.String()
	require.Contains(t, s, " m=+", "%s has no monotonic reading: %s", what, s)
	stripped := tm.Round(0)
	require.NotContains(t, stripped.String(), "m=", "%s: Round(0) kept a monotonic reading", what)
	require.NotEqual(t, s, stripped.String(), "%s: Round(0) changed nothing", what)
	require.True(t, stripped.Equal(tm), "%s: Round(0) moved the instant", what)
	require.True(t, strings.HasPrefix(s, stripped.String()), "%s: the wall-clock part differs: %q vs %q", what, s, stripped.String())
}
