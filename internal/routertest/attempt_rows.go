package routertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// An attempt's limits and its end by snooze: per-attempt timeouts
// (WorkerOptions.Timeout, WithTimeout) and Lease.Snooze, a row per rule,
// on every backend.

func attemptRows() []Row {
	return []Row{rowSnooze, rowSnoozeKeepsLastError, rowSnoozeBadInput, rowRunSnooze, rowTimeout, rowTimeoutWhichApplies, rowTimeoutBadInput}
}

// rowSnooze: Snooze ends the lease and schedules the job after d without
// counting the attempt (a job with one attempt snoozes twice and still
// gets its attempt), keeps its checkpoint and LastError, makes a
// snoozed event, and the lease is refused from then on with LostSnoozed.
var rowSnooze = Row{Name: "snooze/ends the lease, ready again after d, the attempt not counted", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{MaxAttempts: 1, OnEvent: ev.record})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", "pa"))
	l1 := tryAcquire(t, b, "w1")
	require.NoError(t, l1.Heartbeat(ctx, []byte("half")))
	d := 2 * h.Lease()
	require.NoError(t, l1.Snooze(ctx, d))
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StateScheduled, j.State, "snoozed for d > 0: scheduled")
	require.Equal(t, 0, j.Attempt, "the snoozed attempt is not counted")
	require.Empty(t, j.Owner)
	require.False(t, j.RunAt.IsZero())
	_, err := b.TryAcquire(ctx, "w2")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "not ready before d has passed")
	runAt := j.RunAt
	requireLost(t, l1.Heartbeat(ctx, nil), l1.Token(), l1.Token(), leaserouter.LostSnoozed)
	requireLost(t, l1.Complete(ctx), l1.Token(), l1.Token(), leaserouter.LostSnoozed)
	requireLost(t, l1.Snooze(ctx, 0), l1.Token(), l1.Token(), leaserouter.LostSnoozed)
	requireLost(t, l1.Fail(ctx, errBoom), l1.Token(), l1.Token(), leaserouter.LostSnoozed)
	require.Equal(t, leaserouter.StateScheduled, get(t, b, "a").State, "the refusals changed nothing")

	h.Advance(d + h.Lease()/2)
	l2 := tryAcquire(t, b, "w2")
	require.Equal(t, 1, l2.Attempt(), "the first attempt again: the snooze did not spend it")
	require.Greater(t, l2.Token(), l1.Token())
	require.Equal(t, []byte("half"), l2.Progress(), "the checkpoint is kept")
	requireLost(t, l1.Release(ctx), l1.Token(), l2.Token(), leaserouter.LostSuperseded)

	require.NoError(t, l2.Snooze(ctx, 0))
	j = get(t, b, "a")
	require.Equal(t, leaserouter.StatePending, j.State, "snoozed for 0: pending at once")
	require.Equal(t, 0, j.Attempt)
	l3 := tryAcquire(t, b, "w3")
	require.Equal(t, 1, l3.Attempt())
	require.NoError(t, l3.Fail(ctx, errBoom))
	j = get(t, b, "a")
	require.Equal(t, leaserouter.StateDead, j.State, "MaxAttempts 1: the one attempt counted is the failed one")
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "boom", j.LastError)

	s := stats(t, b)
	require.EqualValues(t, 2, s.Snoozed)
	require.EqualValues(t, 3, s.LeasesGranted)
	require.NoError(t, b.Close(ctx))
	evs := ev.drain()
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired,
		leaserouter.EventLeaseExtended, leaserouter.EventSnoozed, leaserouter.EventStaleRejected,
		leaserouter.EventStaleRejected, leaserouter.EventStaleRejected, leaserouter.EventStaleRejected, leaserouter.EventLeaseAcquired,
		leaserouter.EventStaleRejected, leaserouter.EventSnoozed, leaserouter.EventLeaseAcquired,
		leaserouter.EventFailed, leaserouter.EventDead}, kinds(evs, "a"))
	e := first(evs, "a", leaserouter.EventSnoozed)
	require.Equal(t, l1.Token(), e.Token)
	require.Equal(t, "w1", e.WorkerID)
	require.Equal(t, 1, e.Attempt, "the snoozed lease's attempt")
	require.NoError(t, e.Err)
	require.True(t, e.Time.Add(d).Equal(runAt), "run-at %v is the snooze's instant %v plus d", runAt, e.Time)
}}

// rowSnoozeKeepsLastError: a job that failed and is snoozed on its last
// attempt is not dead, however often it snoozes: the attempt goes back
// to what it was, its LastError and checkpoint kept for the next lease.
var rowSnoozeKeepsLastError = Row{Name: "snooze/on the last attempt, not dead; LastError and checkpoint kept", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 2})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	require.NoError(t, tryAcquire(t, b, "w").Fail(ctx, errBoom))
	for i := range 3 { // its last attempt, again and again
		l := tryAcquire(t, b, "w")
		require.Equal(t, 2, l.Attempt(), "snooze %d", i)
		require.NoError(t, l.Heartbeat(ctx, []byte(fmt.Sprint("cp", i))))
		require.NoError(t, l.Snooze(ctx, 0))
		j := get(t, b, "a")
		require.Equal(t, leaserouter.StatePending, j.State, "snooze %d: not dead, whatever the attempts", i)
		require.Equal(t, 1, j.Attempt, "snooze %d: the snoozed lease is not counted", i)
		require.Equal(t, "boom", j.LastError, "the last error is kept")
		require.Equal(t, fmt.Sprint("cp", i), string(j.Progress), "the checkpoint is kept")
		require.Empty(t, j.Owner)
	}
	l := tryAcquire(t, b, "w")
	require.Equal(t, "cp2", string(l.Progress()), "handed to the next lease")
	require.NoError(t, l.Fail(ctx, errors.New("again")))
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StateDead, j.State, "its second counted attempt failed: dead")
	require.Equal(t, 2, j.Attempt)
}}

// rowSnoozeBadInput: a negative delay is refused with ErrInvalidOptions
// and changes nothing; so is a nil lease's. The lease is an hour long:
// that it is still valid after the refusals is the row's, not how fast
// its calls run; the expired lease's snooze has a job set of its own.
var rowSnoozeBadInput = Row{Name: "snooze/a negative delay refused with ErrInvalidOptions, nothing changed", Test: func(t T, h Harness) {
	b := open(t, h, Config{LeaseDuration: time.Hour})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	err := l.Snooze(ctx, -time.Nanosecond)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.NotErrorIs(t, err, leaserouter.ErrLeaseLost, "checked before the lease")
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StateLeased, j.State)
	require.Equal(t, l.Token(), j.Token)
	require.NoError(t, l.Heartbeat(ctx, nil), "the lease is still valid")
	require.EqualValues(t, 0, stats(t, b).Snoozed)
	require.NoError(t, l.Complete(ctx))
	requireLost(t, l.Snooze(ctx, time.Second), l.Token(), l.Token(), leaserouter.LostCompleted)

	b = open(t, h, Config{})
	require.NoError(t, b.Enqueue(ctx, "x", ""))
	l = tryAcquire(t, b, "w")
	expire(h, l, h.Lease())
	requireLost(t, l.Snooze(ctx, 0), l.Token(), l.Token(), leaserouter.LostExpired)
	require.Equal(t, 2, tryAcquire(t, b, "w").Attempt(), "the expiry counted the first attempt; the refused snooze took nothing back")
}}

// rowRunSnooze: a Run handler returning Snooze(d), even wrapped, has its
// job snoozed (attempt not counted: a job with one attempt snoozes and
// then succeeds); Snooze with a negative delay fails the attempt with
// ErrInvalidOptions's message.
var rowRunSnooze = Row{Name: "snooze/a Run handler returning Snooze(d) snoozes; a negative delay fails the attempt", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{MaxAttempts: 1, OnEvent: ev.record})
	ctx := ctxOf(t)
	_, err := b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "s"}, {ID: "wrapped"}, {ID: "neg"}})
	require.NoError(t, err)
	var mu sync.Mutex
	calls := map[string]int{}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- b.Run(rctx, leaserouter.WorkerOptions{Workers: 2}, func(_ context.Context, l Lease) error {
			mu.Lock()
			calls[l.JobID()]++
			n := calls[l.JobID()]
			mu.Unlock()
			switch {
			case l.JobID() == "neg":
				return leaserouter.Snooze(-time.Second)
			case n > 2:
				return nil
			case l.JobID() == "wrapped":
				return fmt.Errorf("later: %w", leaserouter.Snooze(0))
			}
			return leaserouter.Snooze(h.Lease() / 4)
		})
	}()
	want := map[string]leaserouter.State{"s": leaserouter.StateSucceeded, "wrapped": leaserouter.StateSucceeded,
		"neg": leaserouter.StateDead}
	eventually(t, h, "Run ends every job", func() bool {
		for id, s := range want {
			if get(t, b, id).State != s {
				return false
			}
		}
		return true
	})
	stop()
	require.NoError(t, <-ran)
	mu.Lock()
	require.Equal(t, map[string]int{"s": 3, "wrapped": 3, "neg": 1}, calls)
	mu.Unlock()
	for _, id := range []string{"s", "wrapped"} {
		j := get(t, b, id)
		require.Equal(t, 1, j.Attempt, "two snoozes and a success: one attempt")
		require.Empty(t, j.LastError, "a snooze is not a failure")
	}
	require.Contains(t, get(t, b, "neg").LastError, "Snooze(-1s), must be >= 0")
	s := stats(t, b)
	require.EqualValues(t, 4, s.Snoozed, "the negative one not among them")
	require.Zero(t, s.Retries)
	require.NoError(t, b.Close(ctx))
	evs := ev.drain()
	require.NotContains(t, kinds(evs, "s"), leaserouter.EventFailed)
	var snoozed time.Time
	for _, e := range evs {
		switch {
		case e.JobID != "s":
		case e.Kind == leaserouter.EventSnoozed:
			snoozed = e.Time
		case e.Kind == leaserouter.EventLeaseAcquired && !snoozed.IsZero():
			require.GreaterOrEqual(t, e.Time.Sub(snoozed), h.Lease()/4, "leased again d after the snooze")
		}
	}
}}

// rowTimeout: Run cancels the handler's ctx at the attempt's timeout
// (WorkerOptions.Timeout, or the job's WithTimeout) with a *TimeoutError
// cause and DeadlineExceeded, not before (on an exact clock, at that very
// instant); the lease stays valid and heartbeated while
// the handler goes on past its expiry; the handler's error then fails the
// attempt (retried), and a timeout is no expiry.
var rowTimeout = Row{Name: "timeouts/the handler's ctx canceled at the attempt's timeout, the lease kept, the attempt failed", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 2})
	ctx := ctxOf(t)
	limit, own := h.Lease()/4, h.Lease()/8
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	require.NoError(t, b.Enqueue(ctx, "b", "", leaserouter.WithTimeout(own)))
	require.Equal(t, time.Duration(0), get(t, b, "a").Timeout)
	require.Equal(t, own, get(t, b, "b").Timeout)
	type seen struct {
		err, cause, beat error
		deadline         bool
		start, at, done  time.Time // the handler's start, its ctx's deadline, when it ended
		token            leaserouter.Token
	}
	var mu sync.Mutex
	seens := map[string]seen{}
	calls := map[string]int{}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- b.Run(rctx, leaserouter.WorkerOptions{Workers: 2, Timeout: limit}, func(hctx context.Context, l Lease) error {
			mu.Lock()
			calls[l.JobID()]++
			n := calls[l.JobID()]
			mu.Unlock()
			if n > 1 {
				return nil
			}
			start := time.Now()
			at, deadline := hctx.Deadline()
			<-hctx.Done()
			done := time.Now()
			// Past the lease's own duration after the timeout: Run's
			// heartbeats keep it.
			h.Advance(h.Lease() + h.Lease()/4)
			s := seen{err: hctx.Err(), cause: context.Cause(hctx), deadline: deadline, start: start, at: at, done: done, token: l.Token(),
				beat: l.Heartbeat(context.WithoutCancel(hctx), nil)}
			mu.Lock()
			seens[l.JobID()] = s
			mu.Unlock()
			return fmt.Errorf("gave up: %w", hctx.Err())
		})
	}()
	eventually(t, h, "both jobs succeed on their second attempt", func() bool {
		return get(t, b, "a").State == leaserouter.StateSucceeded && get(t, b, "b").State == leaserouter.StateSucceeded
	})
	stop()
	require.NoError(t, <-ran)
	mu.Lock()
	defer mu.Unlock()
	for id, want := range map[string]time.Duration{"a": limit, "b": own} {
		s := seens[id]
		require.True(t, s.deadline, "%s: the handler's ctx has the timeout's deadline", id)
		require.WithinDuration(t, s.start.Add(want), s.at, h.Lease()/4, "%s: the deadline is the handler's start plus the timeout", id)
		// Not canceled early: never before its own deadline (which is
		// the timeout from the handler's start, above). On a real clock
		// the ctx is made a moment before the handler's start, by a
		// margin a busy machine may stretch, so only an exact clock
		// probes the instant itself.
		require.False(t, s.done.Before(s.at), "%s: the ctx ended at %v, before its deadline %v", id, s.done, s.at)
		if h.Caps().ExactClock {
			require.Equal(t, want, s.done.Sub(s.start), "%s: the ctx ends at the timeout's instant, not before", id)
		}
		require.ErrorIs(t, s.err, context.DeadlineExceeded, id)
		var te *leaserouter.TimeoutError
		require.True(t, errors.As(s.cause, &te), "%s: the cause is a *TimeoutError, got %v", id, s.cause)
		require.ErrorIs(t, s.cause, context.DeadlineExceeded, id)
		require.Equal(t, id, te.JobID)
		require.Equal(t, want, te.Timeout, "%s: the job's WithTimeout overrides WorkerOptions.Timeout", id)
		require.NoError(t, s.beat, "%s: a timeout is not a lost lease", id)
		j := get(t, b, id)
		require.Equal(t, 2, j.Attempt, "%s: the timed-out attempt failed and was retried", id)
		require.Equal(t, "gave up: context deadline exceeded", j.LastError, id)
		require.Len(t, j.Errors, 1, "%s: the timed-out attempt recorded, the successful one not", id)
		require.Equal(t, 1, j.Errors[0].Attempt, id)
		require.Equal(t, j.LastError, j.Errors[0].Error, id)
		require.Equal(t, s.token, te.Token, "%s: the attempt's lease", id)
	}
	st := stats(t, b)
	require.EqualValues(t, 0, st.Expirations, "no lease expired: Run heartbeated the timed-out handlers")
	require.Zero(t, st.StaleRejections, "nothing refused: no lease was lost")
	require.EqualValues(t, 2, st.Retries)
}}

// rowTimeoutWhichApplies: a job's WithTimeout limits its attempts
// whatever WorkerOptions.Timeout is (none here); WithTimeout(0), or none,
// takes WorkerOptions.Timeout, and with neither the handler's ctx has no
// deadline.
var rowTimeoutWhichApplies = Row{Name: "timeouts/WithTimeout over WorkerOptions.Timeout; with neither, no deadline", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "own", "", leaserouter.WithTimeout(time.Hour)))
	require.NoError(t, b.Enqueue(ctx, "zero", "", leaserouter.WithTimeout(0)))
	require.NoError(t, b.Enqueue(ctx, "none", ""))
	type seen struct {
		start, at time.Time
		has       bool
	}
	var mu sync.Mutex
	seens := map[string]seen{}
	handler := func(hctx context.Context, l Lease) error {
		at, has := hctx.Deadline()
		mu.Lock()
		seens[l.JobID()] = seen{time.Now(), at, has}
		mu.Unlock()
		return nil
	}
	ran := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seens) == 3
	}
	stop := runUntil(t, b, leaserouter.WorkerOptions{Workers: 1}, handler)
	eventually(t, h, "every job ran", ran)
	require.NoError(t, stop())
	mu.Lock()
	require.True(t, seens["own"].has, "WithTimeout with no worker timeout")
	require.WithinDuration(t, seens["own"].start.Add(time.Hour), seens["own"].at, h.Lease()/4)
	require.False(t, seens["zero"].has, "WithTimeout(0) and no worker timeout: no deadline")
	require.False(t, seens["none"].has, "neither: no deadline")
	clear(seens)
	mu.Unlock()

	require.NoError(t, b.Enqueue(ctx, "own2", "", leaserouter.WithTimeout(time.Hour)))
	require.NoError(t, b.Enqueue(ctx, "zero2", "", leaserouter.WithTimeout(0)))
	require.NoError(t, b.Enqueue(ctx, "none2", ""))
	stop = runUntil(t, b, leaserouter.WorkerOptions{Workers: 1, Timeout: 2 * time.Hour}, handler)
	eventually(t, h, "every job ran", ran)
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	for id, want := range map[string]time.Duration{"own2": time.Hour, "zero2": 2 * time.Hour, "none2": 2 * time.Hour} {
		require.True(t, seens[id].has, id)
		require.WithinDuration(t, seens[id].start.Add(want), seens[id].at, h.Lease()/4, id)
	}
}}

// rowTimeoutBadInput: a negative WithTimeout is refused by Enqueue with
// ErrInvalidJob, a negative WorkerOptions.Timeout by Run with
// ErrInvalidOptions.
var rowTimeoutBadInput = Row{Name: "timeouts/a negative timeout refused: WithTimeout ErrInvalidJob, WorkerOptions ErrInvalidOptions", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.ErrorIs(t, b.Enqueue(ctx, "a", "", leaserouter.WithTimeout(-time.Second)), leaserouter.ErrInvalidJob)
	_, found, err := b.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, found, "a refused job is not enqueued")
	_, err = b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "b", Options: []leaserouter.EnqueueOption{leaserouter.WithTimeout(-1)}}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	err = b.Run(ctx, leaserouter.WorkerOptions{Timeout: -time.Millisecond}, func(context.Context, Lease) error { return nil })
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.Contains(t, err.Error(), "WorkerOptions.Timeout")
}}
