package routertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// Rows returns the contract's rules, each named after the contract's rule
// ("<bullet>/<case>").
func Rows() []Row {
	return append([]Row{
		rowExpiredRefused, rowRefusedChangesNothing, rowSettledByAnyCaller, rowLeaseLasts,
		rowExactInstants, rowTokens, rowHeartbeat, rowAttemptsDead, rowFailBackoff, rowPermanent, rowFailCauseReadOnce, rowDedup,
		rowRetention, rowOrder, rowSerialClaims, rowAcquireBlocks, rowCapacity, rowCancel, rowCloseDrains,
		rowCloseRevokes, rowCloseRevokesLastAttempt, rowEvents, rowEventsExpiry, rowRun, rowRunLeaseLost,
		rowRunEndsOnlyValid, rowKeepAlive, rowBadInput, rowBadOptions,
	}, slices.Concat(contractRows(), adminRows(), attemptRows(), periodicRows())...)
}

var rowExpiredRefused = Row{Name: "one valid lease/expired lease refused, job leased again", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", "pa"))
	l1 := tryAcquire(t, b, "w1")
	require.Equal(t, "a", l1.JobID())
	require.Equal(t, "pa", l1.Payload())
	require.Equal(t, 1, l1.Attempt())
	require.Equal(t, "w1", l1.WorkerID())
	expire(h, l1, h.Lease())
	requireLost(t, l1.Heartbeat(ctx, nil), l1.Token(), l1.Token(), leaserouter.LostExpired)
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StatePending, j.State, "a lease found expired is settled as the reaper would")
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.Owner)
	l2 := tryAcquire(t, b, "w2")
	require.Equal(t, "a", l2.JobID())
	require.Equal(t, 2, l2.Attempt())
	require.Greater(t, l2.Token(), l1.Token())
	requireLost(t, l1.Complete(ctx), l1.Token(), l2.Token(), leaserouter.LostSuperseded)
	requireLost(t, l1.Fail(ctx, errBoom), l1.Token(), l2.Token(), leaserouter.LostSuperseded)
	requireLost(t, l1.Release(ctx), l1.Token(), l2.Token(), leaserouter.LostSuperseded)
	require.NoError(t, l2.Complete(ctx))
	requireLost(t, l2.Complete(ctx), l2.Token(), l2.Token(), leaserouter.LostCompleted)
	require.Equal(t, leaserouter.StateSucceeded, get(t, b, "a").State)
	s := stats(t, b)
	require.EqualValues(t, 2, s.LeasesGranted)
	require.EqualValues(t, 1, s.Expirations)
	require.EqualValues(t, 5, s.StaleRejections)
}}

var rowRefusedChangesNothing = Row{Name: "one valid lease/refused operation changes nothing", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l1 := tryAcquire(t, b, "w1")
	require.NoError(t, l1.Heartbeat(ctx, []byte("one")))
	expire(h, l1, h.Lease())
	l2 := tryAcquire(t, b, "w2")
	require.Equal(t, "one", string(l2.Progress()), "the next lease carries the checkpoint")
	before := get(t, b, "a")
	requireLost(t, l1.Heartbeat(ctx, []byte("stale")), l1.Token(), l2.Token(), leaserouter.LostSuperseded)
	requireLost(t, l1.Fail(ctx, errBoom), l1.Token(), l2.Token(), leaserouter.LostSuperseded)
	after := get(t, b, "a")
	require.Equal(t, leaserouter.StateLeased, after.State)
	require.Equal(t, l2.Token(), after.Token)
	require.Equal(t, "w2", after.Owner)
	require.Equal(t, 2, after.Attempt)
	require.Equal(t, "one", string(after.Progress), "a refused heartbeat stores nothing")
	require.True(t, before.LeaseExpiry.Equal(after.LeaseExpiry), "a refused operation moves no expiry")
	require.Equal(t, before.LastError, after.LastError)
	require.NoError(t, l2.Heartbeat(ctx, nil), "the valid holder is unaffected")
}}

var rowSettledByAnyCaller = Row{Name: "one valid lease/settled by any caller", Test: func(t T, h Harness) {
	bs := h.Open(t, Config{MaxAttempts: 2}, 2)
	ctx := ctxOf(t)
	require.NoError(t, bs[0].Enqueue(ctx, "a", ""))
	l1 := tryAcquire(t, bs[0], "w1")
	expire(h, l1, h.Lease())
	j := get(t, bs[1], "a")
	require.Equal(t, leaserouter.StatePending, j.State, "expired: pending again, whoever looks")
	require.NotEmpty(t, j.LastError)
	l2 := tryAcquire(t, bs[1], "w2")
	require.Equal(t, 2, l2.Attempt())
	expire(h, l2, h.Lease())
	j = get(t, bs[0], "a")
	require.Equal(t, leaserouter.StateFailed, j.State, "expired on its last attempt: dead, whoever looks")
	requireLost(t, l2.Complete(ctx), l2.Token(), l2.Token(), leaserouter.LostExpired)
}}

// rowLeaseLasts: a lease lasts LeaseDuration from its grant, on every
// backend (rowExactInstants probes the instant on an exact clock only):
// its Expiry says so, and well inside it the job is not granted again and
// the holder's heartbeat is accepted. Real clocks get generous margins.
var rowLeaseLasts = Row{Name: "one valid lease/a lease lasts LeaseDuration, its job not leased again before", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	d := h.Lease()
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	before := time.Now()
	l := tryAcquire(t, b, "w")
	after := time.Now()
	require.False(t, l.Expiry().Before(before.Add(d-time.Millisecond)), "expiry %v: LeaseDuration %v from the grant (at or after %v)", l.Expiry(), d, before)
	require.False(t, l.Expiry().After(after.Add(d+time.Millisecond)), "expiry %v: LeaseDuration %v from the grant (at or before %v)", l.Expiry(), d, after)
	h.Advance(d/2 + d/8)
	_, err := b.TryAcquire(ctx, "thief")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "a job whose lease is valid is not granted again")
	require.NoError(t, l.Heartbeat(ctx, nil), "valid still, well before its expiry")
}}

var rowExactInstants = Row{Name: "no hidden timing/lost at exactly its expiry, ready at exactly run-at", Needs: "ExactClock", Test: func(t T, h Harness) {
	b, ctx, l := leasedA(t, h)
	d := h.Lease()
	h.Advance(time.Until(l.Expiry()) - time.Nanosecond)
	require.Equal(t, leaserouter.StateLeased, get(t, b, "a").State, "valid until the instant before its expiry")
	h.Advance(time.Nanosecond)
	requireLost(t, l.Heartbeat(ctx, nil), l.Token(), l.Token(), leaserouter.LostExpired)

	require.NoError(t, b.Enqueue(ctx, "later", "", leaserouter.WithDelay(d)))
	l = tryAcquire(t, b, "w") // a again
	require.Equal(t, "a", l.JobID())
	require.NoError(t, l.Complete(ctx))
	h.Advance(d - time.Nanosecond)
	_, err := b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "not ready before its run-at")
	h.Advance(time.Nanosecond)
	require.Equal(t, "later", tryAcquire(t, b, "w").JobID(), "ready at exactly its run-at")
}}

var rowTokens = Row{Name: "tokens/strictly increasing, above TokenFloor and Unix nanoseconds", Test: func(t T, h Harness) {
	before := time.Now()
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	for i := range 5 {
		require.NoError(t, b.Enqueue(ctx, fmt.Sprint("j", i), ""))
	}
	ls, err := b.TryAcquireMany(ctx, "w", 3)
	require.NoError(t, err)
	require.Len(t, ls, 3)
	last := leaserouter.Token(before.UnixNano())
	for _, l := range append(ls, tryAcquire(t, b, "w"), tryAcquire(t, b, "w")) {
		require.Greater(t, l.Token(), last, "tokens increase over every lease, above the Unix time in ns at New")
		last = l.Token()
	}
	require.NoError(t, ls[0].Release(ctx))
	l := tryAcquire(t, b, "w")
	require.Equal(t, ls[0].JobID(), l.JobID())
	require.Greater(t, l.Token(), last, "a job leased again gets a newer token")
	require.LessOrEqual(t, uint64(l.Token()), uint64(1<<63-1), "tokens fit a signed 64-bit column")

	floor := leaserouter.Token(time.Now().UnixNano()) + 1e15
	b2 := open(t, h, Config{TokenFloor: floor})
	require.NoError(t, b2.Enqueue(ctx, "a", ""))
	require.Greater(t, tryAcquire(t, b2, "w").Token(), floor, "above TokenFloor")
}}

var rowHeartbeat = Row{Name: "heartbeat/never shortens, never changes the token, stores progress", Test: func(t T, h Harness) {
	b, ctx, l := leasedA(t, h)
	d := h.Lease()
	require.Nil(t, l.Progress(), "no checkpoint on a first lease")
	tok, e0 := l.Token(), l.Expiry()
	h.Advance(d / 4)
	p := []byte("step-1")
	require.NoError(t, l.Heartbeat(ctx, p))
	p[0] = 'X' // the backend stored a copy
	e1 := l.Expiry()
	require.Equal(t, tok, l.Token(), "Heartbeat never changes the token")
	require.True(t, e1.After(e0), "a later heartbeat extends the lease: %v then %v", e0, e1)
	j := get(t, b, "a")
	require.Equal(t, tok, j.Token)
	require.WithinDuration(t, e1, j.LeaseExpiry, time.Millisecond, "Get shows the extended expiry")
	require.Equal(t, "step-1", string(j.Progress))
	require.NoError(t, l.Heartbeat(ctx, nil))
	require.False(t, l.Expiry().Before(e1), "never shortens")
	require.Equal(t, "step-1", string(get(t, b, "a").Progress), "nil progress keeps the last")
	require.EqualValues(t, 2, stats(t, b).Heartbeats)
	require.NoError(t, l.Release(ctx))
	l2 := tryAcquire(t, b, "w2")
	require.Equal(t, "step-1", string(l2.Progress()), "the next lease carries the checkpoint")
}}

var rowAttemptsDead = Row{Name: "attempts/expiry or release with attempts used up is dead", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 2})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	require.NoError(t, l.Release(ctx))
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StatePending, j.State, "Release: pending at once")
	require.Equal(t, 1, j.Attempt)
	l = tryAcquire(t, b, "w")
	require.Equal(t, 2, l.Attempt())
	require.NoError(t, l.Release(ctx))
	require.Equal(t, leaserouter.StateFailed, get(t, b, "a").State, "released on its last attempt: dead")

	require.NoError(t, b.Enqueue(ctx, "e", "", leaserouter.WithMaxAttempts(1)))
	l = tryAcquire(t, b, "w")
	expire(h, l, h.Lease())
	j = get(t, b, "e")
	require.Equal(t, leaserouter.StateFailed, j.State, "expired on its last attempt: dead")
	require.Equal(t, 1, j.Attempt)
	require.NotEmpty(t, j.LastError)
	s := stats(t, b)
	require.Equal(t, 2, s.Failed)
	require.EqualValues(t, 2, s.Dead)
}}

var rowFailBackoff = Row{Name: "attempts/Fail schedules after Backoff, or retries at once", Test: func(t T, h Harness) {
	d := h.Lease()
	b := open(t, h, Config{MaxAttempts: 3, Backoff: func(attempt int) time.Duration {
		if attempt == 1 {
			return 100 * d
		}
		return 0
	}})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	start := time.Now()
	require.NoError(t, l.Fail(ctx, errBoom))
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StateScheduled, j.State, "Fail: scheduled after Backoff(attempt)")
	require.WithinDuration(t, start.Add(100*d), j.RunAt, 50*d)
	require.Equal(t, "boom", j.LastError)
	_, err := b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	require.EqualValues(t, 1, stats(t, b).Retries)

	require.NoError(t, b.Enqueue(ctx, "b", ""))
	l = tryAcquire(t, b, "w")
	require.Equal(t, "b", l.JobID())
	require.NoError(t, l.Fail(ctx, errBoom)) // attempt 1: Backoff 100d
	require.NoError(t, b.Cancel(ctx, "b"))
	require.NoError(t, b.Enqueue(ctx, "c", ""))
	l = tryAcquire(t, b, "w")
	require.NoError(t, l.Release(ctx))
	l = tryAcquire(t, b, "w")
	require.Equal(t, 2, l.Attempt())
	require.NoError(t, l.Fail(ctx, errBoom)) // attempt 2: Backoff 0
	l = tryAcquire(t, b, "w")
	require.Equal(t, "c", l.JobID(), "a non-positive backoff retries at once")
	require.Equal(t, 3, l.Attempt())
	require.NoError(t, l.Fail(ctx, errBoom))
	j = get(t, b, "c")
	require.Equal(t, leaserouter.StateFailed, j.State, "failed on its last attempt: dead")
	require.Equal(t, "boom", j.LastError)
}}

var rowPermanent = Row{Name: "attempts/Permanent fails at once, Fail(nil) is unknown error", Test: func(t T, h Harness) {
	require.NoError(t, leaserouter.Permanent(nil))
	b := open(t, h, Config{MaxAttempts: 5})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	require.NoError(t, l.Fail(ctx, leaserouter.Permanent(fmt.Errorf("bad input: %w", errBoom))))
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StateFailed, j.State, "Permanent: dead at once")
	require.Equal(t, 1, j.Attempt)
	require.Contains(t, j.LastError, "bad input: boom")
	require.NoError(t, b.Enqueue(ctx, "n", ""))
	l = tryAcquire(t, b, "w")
	require.NoError(t, l.Fail(ctx, nil))
	j = get(t, b, "n")
	require.Equal(t, "unknown error", j.LastError, "Fail(nil)")
	require.NotEqual(t, leaserouter.StateFailed, j.State, "Fail(nil) is one failed attempt")
	require.EqualValues(t, 1, stats(t, b).Dead)
}}

// askedCause is a cause of Fail that counts the calls of its user code:
// Error, and As (errors.As asks it whether it is a Permanent error).
type askedCause struct{ errors, ases *atomic.Int32 }

func (c askedCause) Error() string      { c.errors.Add(1); return "asked" }
func (c askedCause) As(target any) bool { c.ases.Add(1); return false }

// rowFailCauseReadOnce: Fail reads its cause once, on every backend: its
// Error for the job's LastError and its As for a Permanent error, each
// called once (user code, which may be slow or panic).
var rowFailCauseReadOnce = Row{Name: "attempts/Fail calls its cause's Error and As once each", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 5})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	cause := askedCause{errors: new(atomic.Int32), ases: new(atomic.Int32)}
	require.NoError(t, l.Fail(ctx, cause))
	require.Equal(t, "asked", get(t, b, "a").LastError)
	require.EqualValues(t, 1, cause.errors.Load(), "Error called once")
	require.EqualValues(t, 1, cause.ases.Load(), "As called once")
}}

var rowDedup = Row{Name: "dedup/known ID refused, Retention < 0 drops at once, batch duplicates", Test: func(t T, h Harness) {
	b := open(t, h, Config{Retention: -1})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", "1"))
	require.ErrorIs(t, b.Enqueue(ctx, "a", "2"), leaserouter.ErrDuplicate, "pending")
	l := tryAcquire(t, b, "w")
	require.ErrorIs(t, b.Enqueue(ctx, "a", "3"), leaserouter.ErrDuplicate, "leased")
	require.Equal(t, "1", get(t, b, "a").Payload, "a duplicate changes nothing")
	require.NoError(t, l.Complete(ctx))
	_, ok, err := b.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, ok, "Retention < 0: dropped at once")
	require.NoError(t, b.Enqueue(ctx, "a", "4"))
	l2 := tryAcquire(t, b, "w")
	require.Equal(t, "4", l2.Payload())
	require.Equal(t, 1, l2.Attempt(), "a new job")

	dups, err := b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "b"}, {ID: "a"}, {ID: "c"}, {ID: "b"}})
	require.NoError(t, err)
	require.Equal(t, []int{1, 3}, dups)
	s := stats(t, b)
	require.EqualValues(t, 4, s.Enqueued)
	require.EqualValues(t, 4, s.Duplicates)
	require.EqualValues(t, 1, s.Purged, "Stats.Purged counts a finished job dropped at once (Retention < 0), by the time its ID is enqueued again")

	b2 := open(t, h, Config{})
	require.NoError(t, b2.Enqueue(ctx, "a", ""))
	require.NoError(t, tryAcquire(t, b2, "w").Complete(ctx))
	require.ErrorIs(t, b2.Enqueue(ctx, "a", ""), leaserouter.ErrDuplicate, "finished, within Retention")
}}

var rowRetention = Row{Name: "dedup/a job past its retention may be enqueued again", Test: func(t T, h Harness) {
	d := h.Lease()
	b := open(t, h, Config{Retention: d})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", "1"))
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.ErrorIs(t, b.Enqueue(ctx, "a", "2"), leaserouter.ErrDuplicate)
	h.Advance(d + d/4)
	eventually(t, h, "a job past its retention enqueued again", func() bool {
		err := b.Enqueue(ctx, "a", "3")
		if err != nil {
			require.ErrorIs(t, err, leaserouter.ErrDuplicate)
		}
		return err == nil
	})
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StatePending, j.State)
	require.Equal(t, "3", j.Payload)
	require.Zero(t, j.Attempt)
}}

var rowOrder = Row{Name: "order/priority, then ready time, then enqueue order", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	_, err := b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{
		{ID: "low", Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(-1)}},
		{ID: "first"}, {ID: "second"},
		{ID: "high", Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(5)}},
		{ID: "third"},
	})
	require.NoError(t, err)
	ls, err := b.TryAcquireMany(ctx, "w", 2)
	require.NoError(t, err)
	require.Greater(t, ls[1].Token(), ls[0].Token(), "a batch's tokens increase in slice order")
	for range 3 {
		ls = append(ls, tryAcquire(t, b, "w"))
	}
	var got []string
	for _, l := range ls {
		got = append(got, l.JobID())
		require.NoError(t, l.Complete(ctx))
	}
	require.Equal(t, []string{"high", "first", "second", "third", "low"}, got)

	// A job's ready time is the expiry instant of the lease it lost.
	require.NoError(t, b.Enqueue(ctx, "x", ""))
	l := tryAcquire(t, b, "w")
	expire(h, l, h.Lease())
	require.NoError(t, b.Enqueue(ctx, "y", ""))
	require.Equal(t, "x", tryAcquire(t, b, "w").JobID(), "ready at its lease's expiry, before y's enqueue")
	require.Equal(t, "y", tryAcquire(t, b, "w").JobID())
}}

var rowSerialClaims = Row{Name: "order/concurrent claims never interleave", Needs: "SerialClaims", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	var specs []leaserouter.JobSpec[string]
	for i := range 20 {
		specs = append(specs, leaserouter.JobSpec[string]{ID: fmt.Sprint(i), Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(100 - i)}})
	}
	_, err := b.EnqueueMany(ctx, specs)
	require.NoError(t, err)
	var wg sync.WaitGroup
	got := make([][]Lease, 4)
	for i := range got {
		wg.Go(func() { got[i], _ = b.TryAcquireMany(ctx, "w", 5) })
	}
	wg.Wait()
	for _, ls := range got {
		require.Len(t, ls, 5)
		var first int
		_, _ = fmt.Sscan(ls[0].JobID(), &first)
		for k, l := range ls {
			require.Equal(t, fmt.Sprint(first+k), l.JobID(), "one claim's jobs are consecutive in the order")
		}
	}
}}

var rowAcquireBlocks = Row{Name: "order/blocked Acquire woken by a ready job, returns ctx.Err() or ErrClosed", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	type result struct {
		ls  []Lease
		err error
	}
	wait := func(ch chan result) result {
		t.Helper()
		return await(t, h, "Acquire returns", ch)
	}
	got := make(chan result, 1)
	go func() {
		ls, err := b.AcquireMany(ctx, "w", 2)
		got <- result{ls, err}
	}()
	h.Advance(h.Lease() / 10)
	notYet(t, got, "AcquireMany returned with no job")
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	r := wait(got)
	require.NoError(t, r.err)
	require.Len(t, r.ls, 1, "woken by the enqueue")
	require.Equal(t, "a", r.ls[0].JobID())

	actx, cancel := context.WithCancel(ctx)
	go func() {
		l, err := b.Acquire(actx, "w")
		got <- result{[]Lease{l}, err}
	}()
	h.Advance(h.Lease() / 10)
	cancel()
	require.ErrorIs(t, wait(got).err, context.Canceled)

	go func() {
		l, err := b.Acquire(ctx, "w")
		got <- result{[]Lease{l}, err}
	}()
	h.Advance(h.Lease() / 10)
	done, stop := context.WithCancel(ctx)
	stop()
	require.ErrorIs(t, b.Close(done), context.Canceled, "a lease held, revoked at once")
	require.ErrorIs(t, wait(got).err, leaserouter.ErrClosed)
}}

var rowCapacity = Row{Name: "capacity/beyond it Enqueue returns ErrFull", Needs: "Capacity", Test: func(t T, h Harness) {
	b := open(t, h, Config{Capacity: 2})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	require.NoError(t, b.Enqueue(ctx, "b", ""))
	require.ErrorIs(t, b.Enqueue(ctx, "c", ""), leaserouter.ErrFull)
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, b.Enqueue(ctx, "c", ""), "finished jobs do not count")
}}

var rowCancel = Row{Name: "cancel/pending, scheduled, leased, finished, unknown", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "leased", ""))
	l := tryAcquire(t, b, "w")
	require.NoError(t, b.Enqueue(ctx, "pending", ""))
	require.NoError(t, b.Enqueue(ctx, "scheduled", "", leaserouter.WithDelay(time.Hour)))
	for _, id := range []string{"pending", "scheduled", "leased"} {
		require.NoError(t, b.Cancel(ctx, id), id)
		j := get(t, b, id)
		require.Equal(t, leaserouter.StateCanceled, j.State, id)
		require.Empty(t, j.Owner, id)
	}
	requireLost(t, l.Complete(ctx), l.Token(), l.Token(), leaserouter.LostCanceled)
	require.NoError(t, b.Cancel(ctx, "leased"), "finished: nothing changes")
	require.Equal(t, leaserouter.StateCanceled, get(t, b, "leased").State)
	require.ErrorIs(t, b.Cancel(ctx, "unknown"), leaserouter.ErrNotFound)
	_, err := b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	require.Equal(t, 3, stats(t, b).Canceled)
}}

var rowCloseDrains = Row{Name: "close/drains granted leases", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	require.NoError(t, b.Enqueue(ctx, "b", ""))
	l := tryAcquire(t, b, "w")
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	eventually(t, h, "Close refuses new work", func() bool {
		err := b.Enqueue(ctx, "c", "")
		return errors.Is(err, leaserouter.ErrClosed)
	})
	h.Advance(h.Lease() / 4)
	notYet(t, closed, "Close returned while a granted lease was held")
	require.NoError(t, l.Heartbeat(ctx, nil), "a holder may still heartbeat while Close drains")
	require.NoError(t, l.Complete(ctx))
	require.NoError(t, await(t, h, "Close returns once the lease ended", closed))
	require.Equal(t, leaserouter.StateSucceeded, get(t, b, "a").State)
	require.Equal(t, leaserouter.StatePending, get(t, b, "b").State)
}}

var rowCloseRevokes = Row{Name: "close/revokes when ctx is done, refuses new work, still answers", Test: func(t T, h Harness) {
	b, ctx, l := leasedA(t, h)
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, b.Close(done), context.Canceled, "cut short")
	require.ErrorIs(t, l.Heartbeat(ctx, nil), leaserouter.ErrLeaseLost, "revoked")
	require.ErrorIs(t, l.Complete(ctx), leaserouter.ErrLeaseLost)
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StatePending, j.State, "revoked: pending again at once")
	require.Equal(t, 1, j.Attempt)
	_, err := b.Stats(ctx)
	require.NoError(t, err, "Stats still answers")
	require.ErrorIs(t, b.Enqueue(ctx, "b", ""), leaserouter.ErrClosed)
	_, err = b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "b"}})
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	_, err = b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	_, err = b.Acquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	_, err = b.TryAcquireMany(ctx, "w", 2)
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	require.ErrorIs(t, b.Cancel(ctx, "a"), leaserouter.ErrClosed)
	require.ErrorIs(t, b.Run(ctx, leaserouter.WorkerOptions{}, func(context.Context, Lease) error { return nil }), leaserouter.ErrClosed)
	require.NoError(t, b.Close(ctx), "a second Close")
}}

// rowCloseRevokesLastAttempt: Close's revocation is not one of the ends
// the attempts rule makes dead (expiry, Fail, Release): pgrouter's design
// says the revoked jobs "are pending again at once", and the core never
// kills a job for it (revokeLease).
var rowCloseRevokesLastAttempt = Row{Name: "close/a revoked job is pending again at once, even on its last attempt", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 1})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, b.Close(done), context.Canceled, "cut short")
	requireLost(t, l.Heartbeat(ctx, nil), l.Token(), l.Token(), leaserouter.LostRevoked)
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StatePending, j.State, "revoked on its last attempt: pending again at once")
	require.Equal(t, 1, j.Attempt)
	require.Zero(t, stats(t, b).Dead)
}}

var rowEvents = Row{Name: "events/one per transition with its fields", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{MaxAttempts: 2, OnEvent: ev.record})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	require.ErrorIs(t, b.Enqueue(ctx, "a", ""), leaserouter.ErrDuplicate)
	la := tryAcquire(t, b, "wa")
	require.NoError(t, la.Heartbeat(ctx, nil))
	require.NoError(t, la.Complete(ctx))
	require.Error(t, la.Complete(ctx))
	require.NoError(t, b.Enqueue(ctx, "b", ""))
	lb1 := tryAcquire(t, b, "wb")
	require.NoError(t, lb1.Fail(ctx, errBoom))
	lb2 := tryAcquire(t, b, "wb")
	require.NoError(t, lb2.Release(ctx)) // its last attempt: dead
	require.NoError(t, b.Enqueue(ctx, "c", ""))
	lc := tryAcquire(t, b, "wc")
	require.NoError(t, b.Cancel(ctx, "c"))
	require.NoError(t, b.Close(ctx), "Close returns after every event is delivered")
	evs := ev.drain()

	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventDuplicate,
		leaserouter.EventLeaseAcquired, leaserouter.EventLeaseExtended, leaserouter.EventCompleted, leaserouter.EventStaleRejected},
		kinds(evs, "a"))
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued,
		leaserouter.EventLeaseAcquired, leaserouter.EventFailed, leaserouter.EventRetryScheduled,
		leaserouter.EventLeaseAcquired, leaserouter.EventReleased, leaserouter.EventDead},
		kinds(evs, "b"))
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired, leaserouter.EventCanceled},
		kinds(evs, "c"))

	acq := first(evs, "a", leaserouter.EventLeaseAcquired)
	require.Equal(t, "wa", acq.WorkerID)
	require.Equal(t, 1, acq.Attempt)
	require.Equal(t, la.Token(), acq.Token)
	require.WithinDuration(t, time.Now(), acq.Time, time.Minute)
	for _, k := range []leaserouter.EventKind{leaserouter.EventLeaseExtended, leaserouter.EventCompleted, leaserouter.EventStaleRejected} {
		require.Equal(t, la.Token(), first(evs, "a", k).Token, "%v carries the lease's token", k)
	}
	require.ErrorIs(t, first(evs, "a", leaserouter.EventDuplicate).Err, leaserouter.ErrDuplicate)
	failed := first(evs, "b", leaserouter.EventFailed)
	require.Equal(t, lb1.Token(), failed.Token)
	require.Equal(t, "boom", failed.Err.Error())
	require.Equal(t, 1, failed.Attempt)
	rel := first(evs, "b", leaserouter.EventReleased)
	require.Equal(t, lb2.Token(), rel.Token)
	require.Equal(t, 2, rel.Attempt)
	require.Equal(t, lc.Token(), first(evs, "c", leaserouter.EventCanceled).Token, "canceled while leased: the lease's token")
	for i := 1; i < len(evs); i++ {
		require.False(t, evs[i].Time.Before(evs[i-1].Time.Add(-time.Millisecond)), "events in the order of their transitions: %v after %v", evs[i], evs[i-1])
	}
	// One handle made every transition, one after another: its events
	// come in that order across jobs too (a's, then b's, then c's). On a
	// clock that does not move (synctest) the times above are all equal,
	// so this is the check of the order.
	var order []string
	for _, e := range evs {
		order = append(order, e.JobID)
	}
	require.IsNonDecreasing(t, order, "events in the order of their transitions, across jobs")
}}

var rowEventsExpiry = Row{Name: "events/lease_expired at the expiry instant, then dead", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{OnEvent: ev.record})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "e", "", leaserouter.WithMaxAttempts(1)))
	l := tryAcquire(t, b, "w")
	expire(h, l, h.Lease())
	require.Equal(t, leaserouter.StateFailed, get(t, b, "e").State)
	require.NoError(t, b.Close(ctx))
	evs := ev.drain()
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired,
		leaserouter.EventLeaseExpired, leaserouter.EventDead}, kinds(evs, "e"))
	exp := first(evs, "e", leaserouter.EventLeaseExpired)
	require.Equal(t, l.Token(), exp.Token)
	require.Equal(t, "w", exp.WorkerID)
	require.WithinDuration(t, l.Expiry(), exp.Time, time.Millisecond, "lease_expired: Time is the expiry instant")
	require.Equal(t, l.Token(), first(evs, "e", leaserouter.EventDead).Token)
}}

var rowRun = Row{Name: "workers/Run completes, fails, retries, recovers panics", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 2})
	ctx := ctxOf(t)
	_, err := b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "ok"}, {ID: "err"}, {ID: "perm"}, {ID: "panic"}})
	require.NoError(t, err)
	var mu sync.Mutex
	calls := map[string]int{}
	workers := map[string]bool{}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- b.Run(rctx, leaserouter.WorkerOptions{Workers: 2, WorkerID: "run"}, func(_ context.Context, l Lease) error {
			mu.Lock()
			calls[l.JobID()]++
			workers[l.WorkerID()] = true
			mu.Unlock()
			switch l.JobID() {
			case "err":
				return errBoom
			case "perm":
				return leaserouter.Permanent(errBoom)
			case "panic":
				panic("handler panic")
			}
			return nil
		})
	}()
	want := map[string]leaserouter.State{"ok": leaserouter.StateSucceeded, "err": leaserouter.StateFailed,
		"perm": leaserouter.StateFailed, "panic": leaserouter.StateFailed}
	eventually(t, h, "Run ends every job", func() bool {
		for id, s := range want {
			if get(t, b, id).State != s {
				return false
			}
		}
		return true
	})
	stop()
	require.NoError(t, <-ran, "stopped by its ctx: nil")
	mu.Lock()
	require.Equal(t, map[string]int{"ok": 1, "err": 2, "perm": 1, "panic": 2}, calls, "a failed attempt is retried; Permanent is not")
	for w := range workers {
		require.Contains(t, []string{"run-0", "run-1"}, w, "worker i is <WorkerID>-<i>")
	}
	mu.Unlock()
	require.Equal(t, "boom", get(t, b, "err").LastError)
	require.Contains(t, get(t, b, "panic").LastError, "handler panic", "the recovered panic")
}}

var rowRunLeaseLost = Row{Name: "workers/Run handler ctx canceled when its lease is lost", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	started := make(chan struct{})
	causes := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- b.Run(rctx, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, l Lease) error {
			close(started)
			<-hctx.Done()
			causes <- context.Cause(hctx)
			return nil
		})
	}()
	<-started
	require.NoError(t, b.Cancel(ctx, "a"))
	require.ErrorIs(t, await(t, h, "the handler's ctx canceled", causes), leaserouter.ErrLeaseLost)
	stop()
	require.NoError(t, <-ran)
	require.Equal(t, leaserouter.StateCanceled, get(t, b, "a").State, "a lost lease's nil result completes nothing")
}}

// rowRunEndsOnlyValid: a handler whose lease was released (by anyone)
// and whose job is leased again returns nil, or an error; Run's ending of
// its lease is refused and the new holder is untouched.
var rowRunEndsOnlyValid = Row{Name: "workers/Run ends only a lease still valid", Test: func(t T, h Harness) {
	for _, result := range []error{nil, errBoom} {
		b := open(t, h, Config{})
		ctx := ctxOf(t)
		require.NoError(t, b.Enqueue(ctx, "a", ""))
		leases := make(chan Lease, 1)
		release := make(chan struct{})
		next := make(chan struct{}, 1)
		rctx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() {
			ran <- b.Run(rctx, leaserouter.WorkerOptions{Workers: 1, Batch: 1}, func(_ context.Context, l Lease) error {
				if l.JobID() != "a" {
					next <- struct{}{}
					return nil
				}
				leases <- l
				<-release
				return result
			})
		}()
		l1 := <-leases
		require.NoError(t, l1.Release(ctx), "the handler's lease released by another caller")
		l2 := tryAcquire(t, b, "other")
		require.Greater(t, l2.Token(), l1.Token())
		close(release)
		// Run ends a lease with its next claim at the latest: once the
		// next job's handler runs, a's has been dealt with.
		require.NoError(t, b.Enqueue(ctx, "next", ""))
		<-next
		stop()
		require.NoError(t, <-ran)
		j := get(t, b, "a")
		require.Equal(t, leaserouter.StateLeased, j.State, "handler returned %v: Run left the new lease alone", result)
		require.Equal(t, l2.Token(), j.Token)
		require.Equal(t, 2, j.Attempt)
		require.NoError(t, l2.Complete(ctx), "the new holder is untouched")
	}
}}

var rowKeepAlive = Row{Name: "workers/KeepAlive keeps a lease and reports its loss", Test: func(t T, h Harness) {
	b, ctx, l := leasedA(t, h)
	d := h.Lease()
	kctx, cancel := b.KeepAlive(ctx, l, 0)
	defer cancel()
	h.Advance(2 * d)
	require.NoError(t, kctx.Err(), "kept")
	require.NoError(t, l.Heartbeat(ctx, nil), "still valid after twice its duration")
	cancel()

	// Its ctx is canceled as soon as a heartbeat is refused: with
	// heartbeats every d/10, well before the lease would have lapsed.
	require.NoError(t, b.Enqueue(ctx, "c", ""))
	l = tryAcquire(t, b, "w")
	kctx, cancel = b.KeepAlive(ctx, l, d/10)
	defer cancel()
	h.Advance(d / 2)
	exp := get(t, b, "c").LeaseExpiry
	require.NoError(t, b.Cancel(ctx, "c"))
	eventually(t, h, "KeepAlive's ctx canceled once the lease is lost", func() bool { return kctx.Err() != nil })
	require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrLeaseLost)
	require.True(t, time.Now().Before(exp.Add(-d/4)),
		"canceled at the refused heartbeat (%v), not at the lease's expiry (%v)", time.Now(), exp)
	cancel()

	require.NoError(t, b.Enqueue(ctx, "b", ""))
	l = tryAcquire(t, b, "w")
	kctx, cancel = b.KeepAlive(ctx, l, d)
	defer cancel()
	require.Error(t, kctx.Err(), "interval >= LeaseDuration: canceled at once")
	require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrInvalidOptions)
}}

var rowBadInput = Row{Name: "bad input/documented error for every call", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	for _, c := range []struct {
		name string
		id   string
		opts []leaserouter.EnqueueOption
	}{
		{"empty ID", "", nil},
		{"NUL in ID", "a\x00", nil},
		{"invalid UTF-8 ID", "a\xff", nil},
		{"ID over MaxIDBytes", strings.Repeat("x", leaserouter.MaxIDBytes+1), nil},
		{"WithMaxAttempts(0)", "a", []leaserouter.EnqueueOption{leaserouter.WithMaxAttempts(0)}},
		{"negative WithDelay", "a", []leaserouter.EnqueueOption{leaserouter.WithDelay(-time.Second)}},
	} {
		require.ErrorIs(t, b.Enqueue(ctx, c.id, "", c.opts...), leaserouter.ErrInvalidJob, "Enqueue: %s", c.name)
		_, err := b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "ok"}, {ID: c.id, Options: c.opts}})
		require.ErrorIs(t, err, leaserouter.ErrInvalidJob, "EnqueueMany: %s", c.name)
		require.ErrorContains(t, err, "batch index 1", "EnqueueMany names the index")
		_, ok, err := b.Get(ctx, "ok")
		require.NoError(t, err)
		require.False(t, ok, "an invalid batch enqueues nothing")
	}
	dups, err := b.EnqueueMany(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, dups)
	for _, max := range []int{0, -1} {
		_, err := b.TryAcquireMany(ctx, "w", max)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "TryAcquireMany(%d)", max)
		_, err = b.AcquireMany(ctx, "w", max)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "AcquireMany(%d)", max)
	}
	_, err = b.TryAcquire(ctx, "")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "an empty worker ID is allowed")
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.Acquire(done, "w")
	require.ErrorIs(t, err, context.Canceled, "Acquire with its ctx done")
	require.ErrorIs(t, b.Cancel(ctx, "unknown"), leaserouter.ErrNotFound)
	_, ok, err := b.Get(ctx, "unknown")
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, b.Run(ctx, leaserouter.WorkerOptions{}, nil), leaserouter.ErrInvalidOptions, "nil handler")
	require.ErrorIs(t, b.Run(ctx, leaserouter.WorkerOptions{HeartbeatInterval: h.Lease()}, func(context.Context, Lease) error { return nil }),
		leaserouter.ErrInvalidOptions, "HeartbeatInterval >= LeaseDuration")
	require.ErrorIs(t, b.Run(ctx, leaserouter.WorkerOptions{HeartbeatInterval: -1}, func(context.Context, Lease) error { return nil }),
		leaserouter.ErrInvalidOptions, "negative HeartbeatInterval")
	require.ErrorIs(t, b.Run(ctx, leaserouter.WorkerOptions{Workers: -1}, func(context.Context, Lease) error { return nil }),
		leaserouter.ErrInvalidOptions, "negative Workers")
	s := stats(t, b)
	require.Zero(t, s.Enqueued, "bad input stored nothing")
	require.Zero(t, s.Pending)
}}

var rowBadOptions = Row{Name: "bad input/New refuses bad options with ErrInvalidOptions, one message on every backend", Test: func(t T, h Harness) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{LeaseDuration: -time.Second}, "LeaseDuration is -1s, must be > 0 (or 0 for the default 30s)"},
		{Config{MaxAttempts: -1}, "MaxAttempts is -1, must be >= 1 (or 0 for the default 5)"},
		{Config{MaxAttempts: 1 << 31}, "MaxAttempts is 2147483648, must be <= 2147483647"},
		{Config{TokenFloor: 1 << 63}, "TokenFloor is 9223372036854775808, must be < 9223372036854775807 so tokens fit in an int64"},
		{Config{TokenFloor: 1<<63 - 1}, "TokenFloor is 9223372036854775807, must be < 9223372036854775807 so tokens fit in an int64"},
	} {
		err := h.New(t, c.cfg)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, c.want)
		require.EqualError(t, err, "leaserouter: invalid options: "+c.want)
	}
	require.NoError(t, h.New(t, Config{Retention: -1}), "Retention < 0: drop at once")
	// A positive LeaseDuration below a backend's declared floor.
	floor := h.Caps().MinLeaseDuration
	err := h.New(t, Config{LeaseDuration: time.Microsecond})
	if floor <= time.Microsecond {
		require.NoError(t, err, "no floor on LeaseDuration declared")
		return
	}
	require.EqualError(t, err, fmt.Sprintf("leaserouter: invalid options: LeaseDuration is 1µs, must be >= %v on this backend (or 0 for the default 30s)", floor))
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.NoError(t, h.New(t, Config{LeaseDuration: floor}), "the floor itself is valid")
}}
