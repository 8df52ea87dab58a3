package routertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
		rowRetention, rowOrder, rowOrderByReadyTime, rowSerialClaims, rowAcquireBlocks, rowCapacity, rowCancel, rowCancelScheduledNeverReady, rowCloseDrains,
		rowCloseRevokes, rowCloseRevokesLastAttempt, rowCloseRevokesKeptLeases, rowEvents, rowEventsExpiry, rowRun, rowRunLeaseLost,
		rowRunEndsOnlyValid, rowRunDropsAtOnce, rowKeepAlive, rowBadInput, rowBadInputOneMessage, rowBadOptions,
	}, slices.Concat(contractRows(), adminRows(), attemptRows(), periodicRows(), eventRows(), metadataRows(), errorsRows())...)
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
	require.Equal(t, 2, after.Attempt)
	require.Equal(t, "one", string(after.Progress), "a refused heartbeat stores nothing")
	if !within(t, l2, h) {
		return
	}
	require.Equal(t, leaserouter.StateLeased, after.State)
	require.Equal(t, l2.Token(), after.Token)
	require.Equal(t, "w2", after.Owner)
	require.True(t, before.LeaseExpiry.Equal(after.LeaseExpiry), "a refused operation moves no expiry")
	require.Equal(t, before.LastError, after.LastError)
	requireValid(t, l2, l2.Heartbeat(ctx, nil), "the valid holder is unaffected")
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
	_, err := bs[0].TryAcquire(ctx, "w1")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "a claim settles it too, and finds nothing")
	j = get(t, bs[0], "a")
	require.Equal(t, leaserouter.StateDead, j.State, "expired on its last attempt: dead, whoever looks")
	require.Equal(t, "lease expired", j.LastError)
	requireLost(t, l2.Complete(ctx), l2.Token(), l2.Token(), leaserouter.LostExpired)
	var s leaserouter.Stats
	for _, b := range slices.CompactFunc(slices.Clone(bs), func(x, y Backend) bool { return x == y }) {
		bst := stats(t, b)
		s.Expirations += bst.Expirations
		s.Dead += bst.Dead
	}
	require.EqualValues(t, 2, s.Expirations, "summed over the handles")
	require.EqualValues(t, 1, s.Dead)
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
		require.Equal(t, l.Token(), get(t, b, l.JobID()).Token, "the job has its latest lease's token")
		last = l.Token()
	}
	require.NoError(t, ls[0].Release(ctx))
	l := tryAcquire(t, b, "w")
	require.Equal(t, ls[0].JobID(), l.JobID())
	require.Greater(t, l.Token(), last, "a job leased again gets a newer token")
	require.LessOrEqual(t, uint64(l.Token()), uint64(1<<63-1), "tokens fit a signed 64-bit column")
	last = l.Token()
	require.NoError(t, ls[1].Fail(ctx, errBoom))
	expire(h, l, h.Lease())
	for range 2 { // after a Fail and an expiry
		l := tryAcquire(t, b, "w")
		require.Greater(t, l.Token(), last, "a job leased again gets a newer token")
		last = l.Token()
	}

	floor := leaserouter.Token(time.Now().UnixNano()) + 1e15
	b2 := open(t, h, Config{TokenFloor: floor})
	require.NoError(t, b2.Enqueue(ctx, "a", ""))
	require.Greater(t, tryAcquire(t, b2, "w").Token(), floor, "above TokenFloor")

	floor = 1<<63 - 1 - 1000 // near the top: every token still fits an int64
	b3 := open(t, h, Config{TokenFloor: floor})
	require.NoError(t, b3.Enqueue(ctx, "a", ""))
	for range 3 {
		l := tryAcquire(t, b3, "w")
		require.Greater(t, l.Token(), floor)
		require.LessOrEqual(t, uint64(l.Token()), uint64(1<<63-1), "fits in an int64")
		floor = l.Token()
		require.NoError(t, l.Release(ctx))
	}
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
	if h.Caps().ExactClock {
		require.Equal(t, time.Now().Add(d), e1, "extended to now+LeaseDuration")
	}
	require.Equal(t, tok, l.Token(), "Heartbeat never changes the token")
	require.True(t, e1.After(e0), "a later heartbeat extends the lease: %v then %v", e0, e1)
	j := get(t, b, "a")
	require.Equal(t, tok, j.Token)
	require.Equal(t, "w", j.Owner)
	require.WithinDuration(t, e1, j.LeaseExpiry, time.Millisecond, "Get shows the extended expiry")
	require.Equal(t, "step-1", string(j.Progress))
	require.NoError(t, l.Heartbeat(ctx, nil))
	require.False(t, l.Expiry().Before(e1), "never shortens")
	require.Equal(t, "step-1", string(get(t, b, "a").Progress), "nil progress keeps the last")
	require.EqualValues(t, 2, stats(t, b).Heartbeats)
	require.NoError(t, l.Heartbeat(ctx, []byte{}))
	require.Empty(t, get(t, b, "a").Progress, "empty progress clears it")
	require.NoError(t, l.Heartbeat(ctx, []byte("step-2")))
	require.NoError(t, l.Release(ctx))
	require.ErrorIs(t, l.Heartbeat(ctx, []byte("too late")), leaserouter.ErrLeaseLost)
	require.EqualValues(t, 4, stats(t, b).Heartbeats, "a refused heartbeat is not counted as one")
	l2 := tryAcquire(t, b, "w2")
	require.Equal(t, "step-2", string(l2.Progress()), "the next lease carries the checkpoint; a refused heartbeat stored nothing")
	require.Equal(t, 2, l2.Attempt())
	require.Greater(t, l2.Token(), tok)
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
	require.Equal(t, leaserouter.StateDead, get(t, b, "a").State, "released on its last attempt: dead")

	require.NoError(t, b.Enqueue(ctx, "e", "", leaserouter.WithMaxAttempts(1)))
	l = tryAcquire(t, b, "w")
	expire(h, l, h.Lease())
	j = get(t, b, "e")
	require.Equal(t, leaserouter.StateDead, j.State, "expired on its last attempt: dead")
	require.Equal(t, 1, j.Attempt)
	require.NotEmpty(t, j.LastError)
	s := stats(t, b)
	require.Equal(t, 2, s.DeadJobs)
	//lint:ignore SA1019 the deprecated name is what is checked
	require.Equal(t, 2, s.Failed, "the deprecated name counts the dead jobs too")
	require.EqualValues(t, 2, s.Dead)
}}

var rowFailBackoff = Row{Name: "attempts/Fail schedules after Backoff, or retries at once", Test: func(t T, h Harness) {
	d := h.Lease()
	var mu sync.Mutex
	var asked []int // the attempts Backoff was called with
	b := open(t, h, Config{MaxAttempts: 4, Backoff: func(attempt int) time.Duration {
		mu.Lock()
		asked = append(asked, attempt)
		mu.Unlock()
		switch attempt {
		case 1:
			return 100 * d
		case 2:
			return 0
		}
		return -d
	}})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	start := time.Now()
	require.NoError(t, l.Fail(ctx, errBoom))
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StateScheduled, j.State, "Fail: scheduled after Backoff(attempt)")
	if h.Caps().ExactClock {
		require.Equal(t, start.Add(100*d), j.RunAt, "Backoff(1) from the Fail")
	}
	require.WithinDuration(t, start.Add(100*d), j.RunAt, 50*d)
	require.Equal(t, "boom", j.LastError)
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.Owner)
	_, err := b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	s := stats(t, b)
	require.EqualValues(t, 1, s.Retries)
	require.Equal(t, 1, s.Scheduled)

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
	require.Equal(t, "c", l.JobID(), "a zero backoff retries at once")
	require.Equal(t, 3, l.Attempt())
	require.NoError(t, l.Fail(ctx, errBoom)) // attempt 3: Backoff -d
	l = tryAcquire(t, b, "w")
	require.Equal(t, "c", l.JobID(), "a negative backoff retries at once")
	require.Equal(t, 4, l.Attempt())
	require.NoError(t, l.Fail(ctx, errors.New("boom 4")))
	j = get(t, b, "c")
	require.Equal(t, leaserouter.StateDead, j.State, "failed on its last attempt: dead")
	require.Equal(t, "boom 4", j.LastError)
	s = stats(t, b)
	require.EqualValues(t, 4, s.Retries, "a: 1, b: 1, c: 2")
	require.EqualValues(t, 1, s.Dead)
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(asked), 4)
	require.Equal(t, []int{1, 1, 2, 3}, asked[:4], "Backoff is asked with the attempt that failed (maybe for the last too)")
}}

var rowPermanent = Row{Name: "attempts/Permanent fails at once, Fail(nil) is unknown error", Test: func(t T, h Harness) {
	require.NoError(t, leaserouter.Permanent(nil))
	b := open(t, h, Config{MaxAttempts: 5})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	require.NoError(t, l.Fail(ctx, leaserouter.Permanent(fmt.Errorf("bad input: %w", errBoom))))
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StateDead, j.State, "Permanent: dead at once")
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "bad input: boom", j.LastError)
	require.NoError(t, b.Enqueue(ctx, "wrapped", ""))
	require.NoError(t, tryAcquire(t, b, "w").Fail(ctx, fmt.Errorf("parse: %w", leaserouter.Permanent(errBoom))))
	j = get(t, b, "wrapped")
	require.Equal(t, leaserouter.StateDead, j.State, "a wrapped Permanent fails at once too")
	require.Equal(t, "parse: boom", j.LastError)
	require.NoError(t, b.Enqueue(ctx, "n", ""))
	l = tryAcquire(t, b, "w")
	require.NoError(t, l.Fail(ctx, nil))
	j = get(t, b, "n")
	require.Equal(t, "unknown error", j.LastError, "Fail(nil)")
	require.Equal(t, leaserouter.StatePending, j.State, "Fail(nil) is one failed attempt, retried")
	s := stats(t, b)
	require.EqualValues(t, 2, s.Dead)
	require.EqualValues(t, 1, s.Retries, "Fail(nil) only")
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	j = get(t, b, "n")
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	require.Equal(t, "unknown error", j.LastError, "LastError kept after a later success")
	require.Equal(t, 2, j.Attempt)
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
	ev := newEvents()
	b := open(t, h, Config{Retention: -1, OnEvent: ev.record})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", "1", leaserouter.WithPriority(1)))
	before := get(t, b, "a")
	require.ErrorIs(t, b.Enqueue(ctx, "a", "2", leaserouter.WithPriority(9), leaserouter.WithDelay(time.Hour)), leaserouter.ErrDuplicate, "pending")
	require.Equal(t, before, get(t, b, "a"), "a duplicate changes nothing")
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
	require.NoError(t, b.Enqueue(ctx, "dead", "", leaserouter.WithPriority(10)))
	require.NoError(t, tryAcquire(t, b, "w").Fail(ctx, leaserouter.Permanent(errBoom)))
	require.NoError(t, b.Enqueue(ctx, "canceled", ""))
	require.NoError(t, b.Cancel(ctx, "canceled"))
	for _, id := range []string{"dead", "canceled"} {
		_, ok, err := b.Get(ctx, id)
		require.NoError(t, err)
		require.False(t, ok, "Retention < 0: a %s job dropped at once too", id)
	}
	for _, id := range []string{"dead", "canceled"} {
		require.NoError(t, b.Enqueue(ctx, id, ""), "a dropped ID may be enqueued again")
	}
	s = stats(t, b)
	require.EqualValues(t, 3, s.Purged)
	require.Zero(t, s.Succeeded+s.DeadJobs+s.Canceled, "no finished job counted: none is kept")
	require.EqualValues(t, 1, s.Dead, "a job dead and dropped at once is counted dead all the same")
	require.Zero(t, s.Retries, "a Permanent failure is no retry")
	require.EqualValues(t, 3, s.LeasesGranted)
	require.NoError(t, b.Close(ctx))
	evs := ev.drain()
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventCanceled, leaserouter.EventPurged,
		leaserouter.EventEnqueued}, kinds(evs, "canceled"))
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired, leaserouter.EventFailed,
		leaserouter.EventDead, leaserouter.EventPurged, leaserouter.EventEnqueued}, kinds(evs, "dead"), "dead, then dropped at once")

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
	if h.Caps().ExactClock {
		h.Advance(d - time.Nanosecond)
		require.ErrorIs(t, b.Enqueue(ctx, "a", "2"), leaserouter.ErrDuplicate, "a duplicate until its retention's end")
		require.Equal(t, leaserouter.StateSucceeded, get(t, b, "a").State)
		require.Equal(t, 1, stats(t, b).Succeeded)
		h.Advance(time.Nanosecond)
	}
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
	require.Zero(t, j.Token, "a new job, never leased")
	s := stats(t, b)
	require.EqualValues(t, 1, s.Purged)
	require.Zero(t, s.Succeeded, "finished jobs count only while retained")
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

// rowOrderByReadyTime: among jobs of one priority, the one ready first
// goes first, whatever the enqueue order: a lost lease's job is ready at
// the expiry instant, a delayed job at its run-at, a failed one after its
// backoff; a higher priority goes before them all.
var rowOrderByReadyTime = Row{Name: "order/ready time: a lost lease's expiry, run-at, backoff, against later enqueues", Needs: "ExactClock", Test: func(t T, h Harness) {
	u := h.Lease() / 10 // the lease is 10u
	b := open(t, h, Config{Backoff: func(int) time.Duration { return 3 * u }})
	ctx := ctxOf(t)
	// Enqueue order X, F, S, Z, Y, P; ready order Z, X, S, F, Y (P by priority).
	require.NoError(t, b.Enqueue(ctx, "X", ""))
	require.Equal(t, "X", tryAcquire(t, b, "w").JobID()) // expires at 10u: X is ready at that instant
	require.NoError(t, b.Enqueue(ctx, "F", ""))
	lf := tryAcquire(t, b, "w")
	require.Equal(t, "F", lf.JobID())
	require.NoError(t, b.Enqueue(ctx, "S", "", leaserouter.WithDelay(11*u))) // ready at 11u
	h.Advance(8 * u)
	require.NoError(t, b.Enqueue(ctx, "Z", "")) // ready at 8u
	h.Advance(u)
	require.NoError(t, lf.Fail(ctx, errBoom)) // ready at 12u
	h.Advance(4 * u)
	require.NoError(t, b.Enqueue(ctx, "Y", "")) // ready at 13u
	h.Advance(u)
	require.NoError(t, b.Enqueue(ctx, "P", "", leaserouter.WithPriority(1))) // at 14u, a higher priority
	h.Advance(u)
	var got []string
	for range 6 {
		l := tryAcquire(t, b, "w")
		got = append(got, l.JobID())
		require.NoError(t, l.Complete(ctx))
	}
	require.Equal(t, []string{"P", "Z", "X", "S", "F", "Y"}, got)
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
	require.NoError(t, b.Enqueue(ctx, "b", "", leaserouter.WithDelay(time.Hour)), "scheduled jobs count")
	require.ErrorIs(t, b.Enqueue(ctx, "c", ""), leaserouter.ErrFull)
	_, ok, err := b.Get(ctx, "c")
	require.NoError(t, err)
	require.False(t, ok, "a job refused for capacity is not stored")
	require.EqualValues(t, 2, stats(t, b).Enqueued)
	l := tryAcquire(t, b, "w")
	require.ErrorIs(t, b.Enqueue(ctx, "c", ""), leaserouter.ErrFull, "leased jobs count")
	require.NoError(t, l.Complete(ctx))
	require.NoError(t, b.Enqueue(ctx, "c", ""), "finished jobs do not count")
	require.ErrorIs(t, b.Enqueue(ctx, "d", ""), leaserouter.ErrFull)
	require.NoError(t, b.Cancel(ctx, "b"))
	require.NoError(t, b.Enqueue(ctx, "d", ""), "canceled jobs do not count")
}}

var rowCancel = Row{Name: "cancel/pending, scheduled, leased, finished, unknown", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{OnEvent: ev.record})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "leased", ""))
	l := tryAcquire(t, b, "w")
	require.NoError(t, b.Enqueue(ctx, "pending", ""))
	require.NoError(t, b.Enqueue(ctx, "scheduled", "", leaserouter.WithDelay(time.Hour)))
	require.NoError(t, b.Enqueue(ctx, "done", "", leaserouter.WithPriority(1)))
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, b.Enqueue(ctx, "dead", "", leaserouter.WithPriority(1)))
	require.NoError(t, tryAcquire(t, b, "w").Fail(ctx, leaserouter.Permanent(errBoom)))
	for _, id := range []string{"pending", "scheduled", "leased"} {
		require.NoError(t, b.Cancel(ctx, id), id)
		j := get(t, b, id)
		require.Equal(t, leaserouter.StateCanceled, j.State, id)
		require.Empty(t, j.Owner, id)
		require.True(t, j.LeaseExpiry.IsZero(), id)
	}
	requireLost(t, l.Heartbeat(ctx, nil), l.Token(), l.Token(), leaserouter.LostCanceled)
	requireLost(t, l.Complete(ctx), l.Token(), l.Token(), leaserouter.LostCanceled)
	before := stats(t, b)
	for _, id := range []string{"leased", "done", "dead"} {
		j := get(t, b, id)
		require.NoError(t, b.Cancel(ctx, id), "finished: nil")
		require.Equal(t, j, get(t, b, id), "finished: nothing changes")
	}
	require.Equal(t, before, stats(t, b), "nothing counted")
	require.ErrorIs(t, b.Cancel(ctx, "unknown"), leaserouter.ErrNotFound)
	err := b.Cancel(ctx, "")
	require.ErrorIs(t, err, leaserouter.ErrNotFound, "an ID that cannot exist")
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	_, err = b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	s := stats(t, b)
	require.Equal(t, 3, s.Canceled)
	require.Zero(t, s.Pending+s.Scheduled+s.Leased)

	// Cancel settles first: a job whose last lease expired is dead.
	require.NoError(t, b.Enqueue(ctx, "expired", "", leaserouter.WithMaxAttempts(1)))
	l = tryAcquire(t, b, "w")
	expire(h, l, h.Lease())
	require.NoError(t, b.Cancel(ctx, "expired"), "finished, as the expiry left it: nil")
	require.Equal(t, leaserouter.StateDead, get(t, b, "expired").State, "dead, not canceled")
	requireLost(t, l.Complete(ctx), l.Token(), l.Token(), leaserouter.LostExpired)

	// One EventCanceled per job canceled (the leased one's naming its
	// holder), none for a Cancel of a finished job.
	require.NoError(t, b.Close(ctx)) // every event delivered
	evs := ev.drain()
	for _, id := range []string{"pending", "scheduled", "leased"} {
		canceled := first(evs, id, leaserouter.EventCanceled)
		n := 0
		for _, k := range kinds(evs, id) {
			if k == leaserouter.EventCanceled {
				n++
			}
		}
		require.Equal(t, 1, n, "%s: one canceled event", id)
		if id == "leased" {
			require.Equal(t, "w", canceled.WorkerID, "the canceled lease's holder")
		}
	}
	for _, id := range []string{"done", "dead", "expired"} {
		require.NotContains(t, kinds(evs, id), leaserouter.EventCanceled, "%s: a finished job's Cancel emits nothing", id)
	}
}}

// rowCancelScheduledNeverReady: a job canceled while scheduled (a
// delay, or a failed attempt's backoff) stays canceled when its run-at
// comes: it is never made ready, never leased. A job scheduled alike and
// not canceled is leased then, so the run-at has surely come.
var rowCancelScheduledNeverReady = Row{Name: "cancel/a canceled scheduled job never becomes ready: not at its run-at, nor after its backoff", Test: func(t T, h Harness) {
	d := h.Lease() // the calls before the run-at surely run within it
	b := open(t, h, Config{Backoff: func(int) time.Duration { return d }})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "delayed", "", leaserouter.WithDelay(d)))
	require.NoError(t, b.Enqueue(ctx, "backoff", ""))
	l := tryAcquire(t, b, "w")
	require.NoError(t, l.Fail(ctx, errBoom)) // scheduled again d after the failed attempt
	for _, id := range []string{"delayed", "backoff"} {
		require.Equal(t, leaserouter.StateScheduled, get(t, b, id).State, id)
		require.NoError(t, b.Cancel(ctx, id), id)
	}
	require.NoError(t, b.Enqueue(ctx, "control", "", leaserouter.WithDelay(d)))
	h.Advance(d + d/2)
	var leased []string
	for {
		l, err := b.TryAcquire(ctx, "w")
		if errors.Is(err, leaserouter.ErrNoJob) {
			break
		}
		require.NoError(t, err)
		leased = append(leased, l.JobID())
	}
	require.Equal(t, []string{"control"}, leased, "past the run-at only the job not canceled is leased: a canceled job never is")
	for _, id := range []string{"delayed", "backoff"} {
		j := get(t, b, id)
		require.Equal(t, leaserouter.StateCanceled, j.State, "%s: still canceled past its run-at", id)
	}
	s := stats(t, b)
	require.Equal(t, 2, s.Canceled)
	require.Zero(t, s.Pending+s.Scheduled, "no canceled job counted as waiting")
	require.Equal(t, 1, s.Leased)
}}

var rowCloseDrains = Row{Name: "close/drains granted leases", Test: func(t T, h Harness) {
	b := open(t, h, Config{Backoff: func(int) time.Duration { return time.Hour }})
	ctx := ctxOf(t)
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	la, lb := tryAcquire(t, b, "w"), tryAcquire(t, b, "w")
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	eventually(t, h, "Close refuses new work", func() bool {
		err := b.Enqueue(ctx, "d", "")
		return errors.Is(err, leaserouter.ErrClosed)
	})
	_, err := b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrClosed, "no lease granted while Close drains")
	h.Advance(h.Lease() / 4)
	notYet(t, closed, "Close returned while a granted lease was held")
	require.NoError(t, la.Heartbeat(ctx, []byte("p")), "a holder may still heartbeat while Close drains")
	require.NoError(t, la.Complete(ctx), "and complete")
	h.Advance(h.Lease() / 4)
	notYet(t, closed, "Close returned while a granted lease was still held")
	require.NoError(t, lb.Fail(ctx, errBoom), "and fail")
	require.NoError(t, await(t, h, "Close returns once the leases ended", closed))
	require.Equal(t, leaserouter.StateSucceeded, get(t, b, "a").State)
	require.Equal(t, leaserouter.StateScheduled, get(t, b, "b").State, "failed while draining: its retry scheduled")
	require.Equal(t, leaserouter.StatePending, get(t, b, "c").State)
}}

var rowCloseRevokes = Row{Name: "close/revokes when ctx is done, refuses new work, still answers", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{OnEvent: ev.record})
	ctx := ctxOf(t)
	l := leaseRevokedByClose(t, b)
	requireLost(t, l.Complete(ctx), l.Token(), l.Token(), leaserouter.LostRevoked)
	requireLost(t, l.Release(ctx), l.Token(), l.Token(), leaserouter.LostRevoked)
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StatePending, j.State, "revoked: pending again at once")
	require.Equal(t, 1, j.Attempt, "the attempt is kept")
	require.Empty(t, j.Owner)
	s, err := b.Stats(ctx)
	require.NoError(t, err, "Stats still answers")
	require.Equal(t, 1, s.Pending)
	require.Zero(t, s.Leased)
	// A Close whose ctx was done does not wait for the last events; a
	// second Close does.
	require.NoError(t, b.Close(ctx), "Close again: nil, once the last events are delivered")
	released := first(ev.drain(), "a", leaserouter.EventReleased)
	require.Equal(t, l.Token(), released.Token, "the revocation is the lease's released event")
	require.ErrorIs(t, released.Err, leaserouter.ErrClosed)
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

// leaseRevokedByClose enqueues and leases job "a" of b, then closes b
// with a ctx already done, which revokes the lease at once (Close
// returns context.Canceled): the lease's Heartbeat is refused as
// revoked. It returns the revoked lease.
func leaseRevokedByClose(t T, b Backend) Lease {
	t.Helper()
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, b.Close(done), context.Canceled, "cut short")
	requireLost(t, l.Heartbeat(ctx, nil), l.Token(), l.Token(), leaserouter.LostRevoked)
	return l
}

// rowCloseRevokesLastAttempt: Close's revocation is not one of the ends
// the attempts rule makes dead (expiry, Fail, Release): a revoked job is
// pending again at once (Close's doing, not the job's: a deploy does not
// kill a job on its last attempt).
var rowCloseRevokesLastAttempt = Row{Name: "close/a revoked job is pending again at once, even on its last attempt", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 1})
	leaseRevokedByClose(t, b)
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StatePending, j.State, "revoked on its last attempt: pending again at once")
	require.Equal(t, 1, j.Attempt)
	require.Zero(t, stats(t, b).Dead)
}}

// rowCloseRevokesKeptLeases: leases kept alive (by KeepAlive, or by
// Run's heartbeats around a handler) are held through Close's drain, past
// their duration, and revoked when its ctx ends: the KeepAlive's and the
// handler's contexts are canceled with a cause wrapping ErrLeaseLost, a
// handler's late nil does not complete its job, both jobs are pending
// again, and Run, stopped by Close, returns nil.
var rowCloseRevokesKeptLeases = Row{Name: "close/leases kept through the drain are revoked at its ctx's end: KeepAlive's and Run's contexts end", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "kept", ""))
	l := tryAcquire(t, b, "w")
	kctx, stop := b.KeepAlive(ctx, l, 0)
	defer stop()
	require.NoError(t, b.Enqueue(ctx, "run", ""))
	running, causes, ran := make(chan struct{}), make(chan error, 1), make(chan error, 1)
	var once sync.Once
	go func() {
		ran <- b.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, _ Lease) error {
			once.Do(func() { close(running) })
			<-hctx.Done()
			causes <- context.Cause(hctx)
			return nil
		})
	}()
	await(t, h, "the handler runs", running)
	cctx, cancel := context.WithTimeout(ctx, 2*h.Lease())
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- b.Close(cctx) }()
	h.Advance(h.Lease() + h.Lease()/2)
	require.NoError(t, kctx.Err(), "KeepAlive holds its lease through the drain, past its duration")
	notYet(t, causes, "the handler's ctx ended while Run kept its lease through the drain")
	notYet(t, closed, "Close returned while leases were kept")
	require.ErrorIs(t, await(t, h, "Close returns at its ctx's end", closed), context.DeadlineExceeded)
	require.ErrorIs(t, await(t, h, "the handler's ctx ends", causes), leaserouter.ErrLeaseLost)
	eventually(t, h, "KeepAlive's ctx ends", func() bool { return kctx.Err() != nil })
	require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrLeaseLost)
	require.NoError(t, await(t, h, "Run returns", ran), "Run stopped by Close returns nil")
	for _, id := range []string{"kept", "run"} {
		require.Equal(t, leaserouter.StatePending, get(t, b, id).State, "%s: revoked, not completed by a late nil", id)
	}
	require.Zero(t, stats(t, b).Expirations, "revoked, never expired")
}}

var rowEvents = Row{Name: "events/one per transition with its fields", Test: func(t T, h Harness) {
	ev := newEvents()
	logs := &LogRecorder{}
	b := open(t, h, Config{MaxAttempts: 2, OnEvent: ev.record, Logger: slog.New(logs)})
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
	require.NoError(t, b.Enqueue(ctx, "d", "", leaserouter.WithMaxAttempts(1)))
	require.NoError(t, tryAcquire(t, b, "wd").Fail(ctx, errBoom)) // its last attempt: dead
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
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired, leaserouter.EventFailed,
		leaserouter.EventDead}, kinds(evs, "d"))
	require.ErrorContains(t, first(evs, "d", leaserouter.EventDead).Err, "boom", "dead carries the last error")

	acq := first(evs, "a", leaserouter.EventLeaseAcquired)
	require.Equal(t, "wa", acq.WorkerID)
	require.Equal(t, 1, acq.Attempt)
	require.Equal(t, la.Token(), acq.Token)
	require.WithinDuration(t, time.Now(), acq.Time, time.Minute)
	for _, k := range []leaserouter.EventKind{leaserouter.EventLeaseExtended, leaserouter.EventCompleted, leaserouter.EventStaleRejected} {
		require.Equal(t, la.Token(), first(evs, "a", k).Token, "%v carries the lease's token", k)
	}
	ext := first(evs, "a", leaserouter.EventLeaseExtended)
	require.Equal(t, "wa", ext.WorkerID)
	require.Equal(t, 1, ext.Attempt)
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
	recs := logs.Records()
	require.Len(t, recs, len(evs), "one log record per event")
	for i, r := range recs {
		require.Equal(t, evs[i].Kind.String(), r.Message, "the record's message is its event's kind")
		if evs[i].Kind == leaserouter.EventStaleRejected {
			require.Equal(t, slog.LevelWarn, r.Level, "a stale rejection is a warning")
		}
	}
}}

var rowEventsExpiry = Row{Name: "events/lease_expired at the expiry instant, then dead", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{OnEvent: ev.record})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "e", "", leaserouter.WithMaxAttempts(1)))
	l := tryAcquire(t, b, "w")
	expire(h, l, h.Lease())
	require.Equal(t, leaserouter.StateDead, get(t, b, "e").State)
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
	want := map[string]leaserouter.State{"ok": leaserouter.StateSucceeded, "err": leaserouter.StateDead,
		"perm": leaserouter.StateDead, "panic": leaserouter.StateDead}
	eventually(t, h, "Run ends every job", func() bool {
		for id, s := range want {
			if get(t, b, id).State != s {
				return false
			}
		}
		return true
	})
	require.NoError(t, b.Enqueue(ctx, "late", ""))
	eventually(t, h, "an idle Run takes a job enqueued later, its workers alive after the panics", func() bool {
		return get(t, b, "late").State == leaserouter.StateSucceeded
	})
	stop()
	require.NoError(t, <-ran, "stopped by its ctx: nil")
	mu.Lock()
	require.Equal(t, map[string]int{"ok": 1, "err": 2, "perm": 1, "panic": 2, "late": 1}, calls, "a failed attempt is retried; Permanent is not")
	for w := range workers {
		require.Contains(t, []string{"run-0", "run-1"}, w, "worker i is <WorkerID>-<i>")
	}
	mu.Unlock()
	require.Equal(t, "boom", get(t, b, "err").LastError)
	require.Equal(t, "boom", get(t, b, "perm").LastError)
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
	cancel() // idempotent
	require.Error(t, kctx.Err(), "cancel cancels its ctx")
	expire(h, l, d)
	require.Equal(t, leaserouter.StatePending, get(t, b, "a").State, "no heartbeat after cancel: the lease lapsed")
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx)) // a, out of the way

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
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, context.Cause(kctx), &lost)
	require.Equal(t, leaserouter.LostCanceled, lost.Reason)
	require.True(t, time.Now().Before(exp.Add(-d/4)),
		"canceled at the refused heartbeat (%v), not at the lease's expiry (%v)", time.Now(), exp)
	cancel()

	require.NoError(t, b.Enqueue(ctx, "b", ""))
	l = tryAcquire(t, b, "w")
	kctx, cancel = b.KeepAlive(ctx, l, d)
	defer cancel()
	require.Error(t, kctx.Err(), "interval >= LeaseDuration: canceled at once")
	require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrInvalidOptions)
	require.NoError(t, l.Complete(ctx), "the lease itself is untouched")

	require.NoError(t, b.Enqueue(ctx, "e", ""))
	l = tryAcquire(t, b, "w")
	expire(h, l, d)
	kctx, cancel = b.KeepAlive(ctx, l, 0)
	defer cancel()
	eventually(t, h, "KeepAlive of an expired lease: its ctx canceled", func() bool { return kctx.Err() != nil })
	require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrLeaseLost)
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
