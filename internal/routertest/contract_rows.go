package routertest

// Rows for the rules that drifted between the backends and were closed
// into internal/contract: each one answer, checked here once for every
// backend (before, each had a test per backend under one name).

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// contractRows are the rows of the rules in internal/contract.
func contractRows() []Row {
	return []Row{
		rowEventBacklog, rowEventHeld, rowPanickingBackoff, rowHookPanic, rowHookGoexit,
		rowHandlerPanicLastError, rowBatchAfterCut, rowHandlerResultAfterStop, rowHandlerResultWhileCloseDrains, rowKeepAliveNilLease,
		rowKeepAliveIntervalFloor, rowKeepAliveSecondCoexists, rowKeepAliveCancelWaits,
		rowKeepAliveHolderEndIsNoRefusal,
	}
}

// LogRecorder is a slog.Handler that keeps every record, for rows that
// check what a backend reports through its Logger (and for the core's
// own tests). It is safe for concurrent use; its zero value is ready.
type LogRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Enabled is true at every level: h keeps every record.
func (h *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r; safe for concurrent use.
func (h *LogRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// WithAttrs returns h: attributes given this way are not kept.
func (h *LogRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h: groups are not kept.
func (h *LogRecorder) WithGroup(string) slog.Handler { return h }

// Records returns the records kept so far, in order.
func (h *LogRecorder) Records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// Messages returns every record's message, in order (nil: none).
func (h *LogRecorder) Messages() []string {
	var all []string
	for _, r := range h.Records() {
		all = append(all, r.Message)
	}
	return all
}

// Errors returns the messages of the records at level Error, each with
// its job_id.
func (h *LogRecorder) Errors() []string {
	var out []string
	for _, r := range h.Records() {
		if r.Level != slog.LevelError {
			continue
		}
		job := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "job_id" {
				job = a.Value.String()
			}
			return true
		})
		out = append(out, r.Message+" job_id="+job)
	}
	return out
}

// count returns how many records have message msg.
func (h *LogRecorder) count(msg string) int {
	n := 0
	for _, m := range h.Messages() {
		if m == msg {
			n++
		}
	}
	return n
}

// eventBacklog is the contract's bound, written out: a row using the contract's
// constant would follow it if it changed.
const eventBacklog = 16384

// rowEventBacklog: with the hook stuck, producers of new work go on until
// 16384 events are undelivered (the one in the hook included), and wait
// from there; once the hook goes on, so do they.
var rowEventBacklog = Row{Name: "events/the backlog is 16384 events, producers of new work wait beyond it", Test: func(t T, h Harness) {
	gate := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(gate) }) }
	b := open(t, h, Config{OnEvent: func(leaserouter.Event) { <-gate }})
	t.Cleanup(unblock) // before the backend's Close, which waits for delivery
	ctx := ctxOf(t)
	enqueueAllButOne(t, b)
	last := make(chan error, 1)
	go func() { last <- b.Enqueue(ctx, "last", "") }()
	require.NoError(t, await(t, h, "the 16384th event has room", last))
	over := make(chan error, 1)
	go func() { over <- b.Enqueue(ctx, "over", "") }()
	h.Advance(h.Lease() / 10)
	notYet(t, over, "the 16385th event's Enqueue returned with 16384 undelivered")
	unblock()
	require.NoError(t, await(t, h, "the producer goes on once the hook does", over))
}}

// notYet fails t if ch has delivered, with what it delivered.
func notYet[V any](t T, ch <-chan V, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Errorf("%s: %v", what, v)
		t.FailNow()
	default:
	}
}

// await returns what ch delivers, advancing the backend's clock until it
// does.
func await[V any](t T, h Harness, what string, ch <-chan V) V {
	t.Helper()
	var v V
	eventually(t, h, what, func() bool {
		select {
		case v = <-ch:
			return true
		default:
			return false
		}
	})
	return v
}

// rowEventHeld: the events that end a lease carry Held, how long it was
// held from its grant (Expiry - LeaseDuration): lease_expired to the
// expiry instant, canceled (of a leased job) to the cancel, completed to
// the completion; and completed's Time is the instant the job's record
// shows (UpdatedAt).
var rowEventHeld = Row{Name: "events/Held on the events that end a lease, completed at the record's instant", Test: func(t T, h Harness) {
	ev := newEvents()
	d := h.Lease()
	b := open(t, h, Config{MaxAttempts: 1, OnEvent: ev.record})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "expires", ""))
	le := tryAcquire(t, b, "w")
	expire(h, le, d)
	_, err := b.TryAcquire(ctx, "w") // settles the expiry
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	require.NoError(t, b.Enqueue(ctx, "canceled", ""))
	lc := tryAcquire(t, b, "w")
	h.Advance(d / 4)
	require.NoError(t, b.Cancel(ctx, "canceled"))
	require.NoError(t, b.Enqueue(ctx, "completed", ""))
	lp := tryAcquire(t, b, "w")
	h.Advance(d / 8)
	require.NoError(t, lp.Complete(ctx))
	require.NoError(t, b.Close(ctx), "Close returns after every event is delivered")
	evs := ev.drain()

	exp := first(evs, "expires", leaserouter.EventLeaseExpired)
	require.Equal(t, le.Token(), exp.Token)
	require.Equal(t, d, exp.Held, "lease_expired: held from grant to expiry")
	can := first(evs, "canceled", leaserouter.EventCanceled)
	require.Equal(t, lc.Token(), can.Token)
	require.GreaterOrEqual(t, can.Held, d/4)
	require.Equal(t, can.Time.Sub(lc.Expiry().Add(-d)), can.Held, "canceled: held from grant to the cancel")
	comp := first(evs, "completed", leaserouter.EventCompleted)
	require.Equal(t, lp.Token(), comp.Token)
	require.GreaterOrEqual(t, comp.Held, d/8)
	require.Equal(t, comp.Time.Sub(lp.Expiry().Add(-d)), comp.Held, "completed: held from grant to the completion")
	j := get(t, b, "completed")
	require.True(t, comp.Time.Equal(j.UpdatedAt), "completed at %v, the record says %v", comp.Time, j.UpdatedAt)
}}

// rowPanickingBackoff: a Backoff that panics counts as DefaultBackoff (the
// attempt is retried later, not at once), is counted in
// Stats.CallbackPanics and reported at level Error through the Logger.
var rowPanickingBackoff = Row{Name: "user callbacks/a panicking Backoff counts as DefaultBackoff, counted and reported through the Logger", Test: func(t T, h Harness) {
	rec := &LogRecorder{}
	b := open(t, h, Config{Logger: slog.New(rec), Backoff: func(int) time.Duration { panic("boom") }})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "j", ""))
	require.NoError(t, tryAcquire(t, b, "w").Fail(ctx, errors.New("failed")))
	require.Equal(t, leaserouter.StateScheduled, get(t, b, "j").State, "retried after DefaultBackoff")
	require.EqualValues(t, 1, stats(t, b).CallbackPanics)
	eventually(t, h, "retry_scheduled reaches the Logger", func() bool { return rec.count("retry_scheduled") > 0 })
	reports := rec.Errors()
	require.Equal(t, []string{"leaserouter: Backoff(1) panicked: boom; used DefaultBackoff job_id=j"}, reports)
}}

// rowHookPanic: a panic in OnEvent is counted and reported at level Error
// through the configured Logger (not slog.Default()), and delivery goes
// on: the Logger still gets the event.
var rowHookPanic = Row{Name: "user callbacks/a panicking OnEvent is reported through the Logger and delivery goes on", Test: func(t T, h Harness) {
	rec := &LogRecorder{}
	b := open(t, h, Config{Logger: slog.New(rec), OnEvent: func(e leaserouter.Event) {
		if e.Kind == leaserouter.EventEnqueued {
			panic("boom")
		}
	}})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "j", ""))
	eventually(t, h, "the event reaches the Logger", func() bool { return rec.count("enqueued") > 0 })
	reports := rec.Errors()
	require.Equal(t, []string{"leaserouter: OnEvent panicked on enqueued: boom job_id=j"}, reports)
	require.Equal(t, []string{"leaserouter: OnEvent panicked on enqueued: boom", "enqueued"}, rec.Messages(),
		"the report first, then the event")
	require.EqualValues(t, 1, stats(t, b).CallbackPanics)
}}

// rowHookGoexit: an OnEvent that calls runtime.Goexit (as t.FailNow does)
// ends no delivery: it counts as a panic of the hook, reported through
// the Logger, the Logger still gets that event, and later events are
// delivered.
var rowHookGoexit = Row{Name: "user callbacks/an OnEvent calling runtime.Goexit is survived", Test: func(t T, h Harness) {
	rec := &LogRecorder{}
	var mu sync.Mutex
	var seen []string
	b := open(t, h, Config{Logger: slog.New(rec), OnEvent: func(e leaserouter.Event) {
		mu.Lock()
		seen = append(seen, e.JobID)
		mu.Unlock()
		if e.JobID == "a" {
			runtime.Goexit()
		}
	}})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	require.NoError(t, b.Enqueue(ctx, "b", ""))
	eventually(t, h, "both events reach the Logger", func() bool { return rec.count("enqueued") == 2 })
	require.NoError(t, b.Close(ctx))
	mu.Lock()
	require.Equal(t, []string{"a", "b"}, seen, "the hook gets the events after the one it exited in")
	mu.Unlock()
	reports := rec.Errors()
	require.Equal(t, []string{"leaserouter: OnEvent called runtime.Goexit on enqueued job_id=a"}, reports)
	require.EqualValues(t, 1, stats(t, b).CallbackPanics)
}}

// runUntil runs b.Run with opts and handler in a goroutine and returns a
// func that stops it and returns Run's result; a row that fails first
// has it stopped by t's cleanup.
func runUntil(t T, b Backend, opts leaserouter.WorkerOptions, handler Handler) (stop func() error) {
	ctx, cancel := context.WithCancel(ctxOf(t))
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, opts, handler) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// rowHandlerPanicLastError: a handler's panic fails the attempt with
// LastError "panic: <value>", a blank line and the stack, the same text
// on every backend, recorded in Job.Errors as the attempt's error.
var rowHandlerPanicLastError = Row{Name: "workers/a handler's panic fails its attempt with LastError panic, a blank line, the stack", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 1})
	require.NoError(t, b.Enqueue(ctxOf(t), "p", ""))
	stop := runUntil(t, b, leaserouter.WorkerOptions{Workers: 1}, func(context.Context, Lease) error { panic("boom") })
	eventually(t, h, "the job is dead", func() bool { return get(t, b, "p").State == leaserouter.StateDead })
	require.NoError(t, stop())
	j := get(t, b, "p")
	require.True(t, strings.HasPrefix(j.LastError, "panic: boom\n\n"), "LastError %q", j.LastError)
	require.Contains(t, j.LastError, "goroutine ", "the stack follows")
	require.Len(t, j.Errors, 1, "the panic's attempt recorded")
	require.Equal(t, 1, j.Errors[0].Attempt)
	require.Equal(t, j.LastError, j.Errors[0].Error)
}}

// rowBatchAfterCut: after a Run batch that was cut (a heartbeat came
// while a job ran, and the jobs waiting their turn were handed back), the
// worker leases one job at a time again. The batches grow to four (q1;
// q2, q3; then a, b, c, d), a runs until its lease is extended, which
// cuts the batch; b leads the next one, and is leased alone. Whatever the
// cut batch took, another size than 1 leases b with c.
var rowBatchAfterCut = Row{Name: "workers/after a cut batch Run leases one job at a time", Test: func(t T, h Harness) {
	// Long enough that the batches before a's end well within it on a busy
	// machine, short enough that b runs within eventually's 20s.
	interval := min(2*h.Lease(), 5*time.Second)
	var aToken atomic.Uint64
	aBeat := make(chan struct{})
	var once sync.Once
	b := open(t, h, Config{LeaseDuration: 5 * interval, OnEvent: func(e leaserouter.Event) {
		if e.Kind == leaserouter.EventLeaseExtended && uint64(e.Token) == aToken.Load() {
			once.Do(func() { close(aBeat) })
		}
	}})
	ctx := ctxOf(t)
	var specs []leaserouter.JobSpec[string]
	for i, id := range []string{"q1", "q2", "q3", "a", "b", "c", "d", "e"} {
		specs = append(specs, leaserouter.JobSpec[string]{ID: id, Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(100 - i)}})
	}
	_, err := b.EnqueueMany(ctx, specs)
	require.NoError(t, err)
	leasedAtB := make(chan int, 1)
	stop := runUntil(t, b, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: interval, Batch: 8},
		func(ctx context.Context, l Lease) error {
			switch l.JobID() {
			case "a": // runs until a heartbeat has cut its batch and extended it
				aToken.Store(uint64(l.Token()))
				select {
				case <-aBeat:
				case <-time.After(3 * interval):
				}
			case "b":
				if s, err := b.Stats(ctx); err == nil {
					select {
					case leasedAtB <- s.Leased:
					default:
					}
				}
			}
			return nil
		})
	n := await(t, h, "b runs", leasedAtB)
	require.NoError(t, stop())
	require.Equal(t, 1, n, "jobs leased when b, first of the batch after the cut one, starts")
}}

// rowHandlerResultAfterStop: once Run's ctx is done, a handler that still
// returns nil completes its job, and one that returns an error releases
// it (pending again), not a failed attempt (Backoff an hour: a failed
// attempt would leave it scheduled).
var rowHandlerResultAfterStop = Row{Name: "workers/after Run's ctx is done a nil result completes, an error releases, a Snooze snoozes", Test: func(t T, h Harness) {
	b := open(t, h, Config{Backoff: func(int) time.Duration { return time.Hour }})
	ctx := ctxOf(t)
	ids := []string{"ok", "err", "snooze", "neg"}
	for _, id := range ids[:3] {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	require.NoError(t, b.Enqueue(ctx, "neg", "", leaserouter.WithMaxAttempts(1)))
	var started atomic.Int32
	stop := runUntil(t, b, leaserouter.WorkerOptions{Workers: 4, Batch: 1}, func(hctx context.Context, l Lease) error {
		started.Add(1)
		<-hctx.Done()
		switch l.JobID() {
		case "err":
			return errors.New("stopped")
		case "snooze":
			return leaserouter.Snooze(0)
		case "neg":
			return leaserouter.Snooze(-time.Second)
		}
		return nil
	})
	eventually(t, h, "every handler runs", func() bool { return started.Load() == 4 })
	require.NoError(t, stop())
	eventually(t, h, "every job settled", func() bool {
		for _, id := range ids {
			if get(t, b, id).State == leaserouter.StateLeased {
				return false
			}
		}
		return true
	})
	require.Equal(t, leaserouter.StateSucceeded, get(t, b, "ok").State, "nil after the stop: completed")
	require.Equal(t, leaserouter.StatePending, get(t, b, "err").State, "an error after the stop: released")
	require.Equal(t, 1, get(t, b, "err").Attempt, "a release counts the attempt")
	j := get(t, b, "snooze")
	require.Equal(t, leaserouter.StatePending, j.State, "Snooze(0) after the stop: snoozed")
	require.Equal(t, 0, j.Attempt, "snoozed, not released: the attempt not counted")
	j = get(t, b, "neg")
	require.Equal(t, leaserouter.StateDead, j.State, "a negative Snooze fails its attempt, stopping or not")
	require.Contains(t, j.LastError, "Snooze(-1s), must be >= 0")
}}

// rowHandlerResultWhileCloseDrains: Close lets the leases granted finish
// (it cancels no handler before its own ctx ends), so a handler that
// returns while Close drains is judged as any other: an error fails the
// attempt (Backoff an hour: scheduled, LastError kept), nil completes.
// Only Run's own ctx turns an error into a release.
var rowHandlerResultWhileCloseDrains = Row{Name: "workers/while Close drains an error fails the attempt, nil completes", Test: func(t T, h Harness) {
	b := open(t, h, Config{Backoff: func(int) time.Duration { return time.Hour }})
	ctx := ctxOf(t)
	for _, id := range []string{"err", "ok"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	var started atomic.Int32
	proceed := make(chan struct{})
	_ = runUntil(t, b, leaserouter.WorkerOptions{Workers: 2, Batch: 1}, func(hctx context.Context, l Lease) error {
		started.Add(1)
		<-proceed
		if l.JobID() == "err" {
			return errBoom
		}
		return nil
	})
	eventually(t, h, "both handlers run", func() bool { return started.Load() == 2 })
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	eventually(t, h, "Close has begun", func() bool {
		return errors.Is(b.Enqueue(ctx, "late", ""), leaserouter.ErrClosed)
	})
	close(proceed)
	require.NoError(t, await(t, h, "Close returns once the handlers did", closed))
	j := get(t, b, "err")
	require.Equal(t, leaserouter.StateScheduled, j.State, "an error while Close drains: a failed attempt, not a release")
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "boom", j.LastError)
	require.Equal(t, leaserouter.StateSucceeded, get(t, b, "ok").State, "nil while Close drains: completed")
}}

// rowKeepAliveNilLease: KeepAlive of a nil or zero lease returns a context
// already canceled, its cause wrapping ErrInvalidOptions with one message;
// its cancel func is safe.
var rowKeepAliveNilLease = Row{Name: "workers/KeepAlive of a nil or zero lease is canceled at once with ErrInvalidOptions", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	for _, l := range []Lease{nil, ZeroLease} {
		ctx, cancel := b.KeepAlive(ctxOf(t), l, 0)
		require.Error(t, ctx.Err())
		require.ErrorIs(t, context.Cause(ctx), leaserouter.ErrInvalidOptions)
		require.EqualError(t, context.Cause(ctx), "leaserouter: KeepAlive of a nil *Lease: leaserouter: invalid options")
		cancel()
	}
}}

// rowKeepAliveIntervalFloor: a positive interval below
// MinHeartbeatInterval is raised to it, or to a quarter of LeaseDuration
// if that is shorter; <= 0 means LeaseDuration/3.
var rowKeepAliveIntervalFloor = Row{Name: "workers/KeepAlive's interval is never below MinHeartbeatInterval or a quarter of the lease", Test: func(t T, h Harness) {
	b := open(t, h, Config{LeaseDuration: 3 * time.Second})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	_, stop1 := b.KeepAlive(ctx, l, time.Nanosecond)
	defer stop1()
	_, stop2 := b.KeepAlive(ctx, l, 0)
	defer stop2()
	_, stop4 := b.KeepAlive(ctx, l, -time.Second)
	defer stop4()
	require.Equal(t, []time.Duration{leaserouter.MinHeartbeatInterval, time.Second, time.Second}, h.KeptIntervals(l),
		"a zero or negative interval is LeaseDuration/3")

	// A lease of 2ms is held long enough to read its keeper only on an
	// exact clock; on a real one it may be lost before KeepAlive returns
	// (the rule itself, contract.HeartbeatInterval, is shared code with
	// a test of its own).
	if !h.Caps().ExactClock {
		t.Logf("a quarter of a 2ms lease: not probed on %s (real clock)", h.Name())
		return
	}
	b = open(t, h, Config{LeaseDuration: 2 * time.Millisecond})
	require.NoError(t, b.Enqueue(ctx, "b", ""))
	l = tryAcquire(t, b, "w")
	_, stop3 := b.KeepAlive(ctx, l, time.Nanosecond)
	defer stop3()
	require.Equal(t, []time.Duration{500 * time.Microsecond}, h.KeptIntervals(l), "a quarter of a short lease")
}}

// rowKeepAliveSecondCoexists: KeepAlive called twice for one lease keeps
// it alive for both; canceling one leaves the other's context live and
// the lease kept.
var rowKeepAliveSecondCoexists = Row{Name: "workers/KeepAlive twice on one lease: both keep it, each canceled on its own", Test: func(t T, h Harness) {
	b, ctx, l := leasedA(t, h)
	d := h.Lease()
	first, cancel1 := b.KeepAlive(ctx, l, d/5)
	defer cancel1()
	second, cancel2 := b.KeepAlive(ctx, l, d/5)
	require.NoError(t, first.Err(), "a second KeepAlive does not cancel the first")
	require.NoError(t, second.Err())
	cancel2()
	require.ErrorIs(t, context.Cause(second), context.Canceled)
	h.Advance(3 * d) // kept by the first alone
	require.NoError(t, first.Err())
	require.NoError(t, l.Complete(ctx))
}}

// rowKeepAliveCancelWaits: KeepAlive's cancel func returns only after a
// heartbeat in flight has returned, so no heartbeat of it lands after
// cancel (the heartbeat is held by Harness.StallHeartbeats). Unbubbled:
// the core's heartbeat is held inside its lock, and a goroutine waiting
// for a mutex is not durably blocked in synctest.
var rowKeepAliveCancelWaits = Row{Name: "workers/KeepAlive's cancel returns after the heartbeat in flight", Unbubbled: true, Test: func(t T, h Harness) {
	b, ctx, l := leasedA(t, h)
	stalled, release := h.StallHeartbeats(t, b)
	defer release() // a failing row still lets the backend go
	kctx, cancel := b.KeepAlive(ctx, l, 10*time.Millisecond)
	select {
	case <-stalled:
	case <-time.After(10 * time.Second):
		t.Errorf("no heartbeat stalled")
		t.FailNow()
	}
	canceled := make(chan struct{})
	go func() {
		cancel()
		close(canceled)
	}()
	select {
	case <-canceled:
		t.Errorf("cancel returned while a heartbeat was in flight")
		t.FailNow()
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Errorf("cancel did not return once the heartbeat did")
		t.FailNow()
	}
	require.ErrorIs(t, context.Cause(kctx), context.Canceled)
	require.EqualValues(t, 1, stats(t, b).Heartbeats, "the heartbeat in flight had landed when cancel returned")
	require.NoError(t, l.Complete(ctx))
}}

// rowKeepAliveHolderEndIsNoRefusal: the holder's own end of a lease kept
// alive (Complete, Fail, Release, Snooze) ends the KeepAlive's context as
// that call returns, with a *LeaseLostError whose Reason is that end, and
// is no refusal: KeepAlive's heartbeats due after it (before its cancel
// func is called) count no StaleRejections or HeartbeatsRefused and make
// no stale_rejected event (contract.EndedByHolder).
var rowKeepAliveHolderEndIsNoRefusal = Row{Name: "workers/the holder's own end of a kept lease is no refusal: KeepAlive's ctx ends at once with the reason", Test: func(t T, h Harness) {
	ctx := ctxOf(t)
	interval := max(h.Lease()/5, leaserouter.MinHeartbeatInterval)
	for _, e := range []struct {
		reason leaserouter.LostReason
		end    func(Lease) error
	}{
		{leaserouter.LostCompleted, func(l Lease) error { return l.Complete(ctx) }},
		{leaserouter.LostFailed, func(l Lease) error { return l.Fail(ctx, errBoom) }},
		{leaserouter.LostReleased, func(l Lease) error { return l.Release(ctx) }},
		{leaserouter.LostSnoozed, func(l Lease) error { return l.Snooze(ctx, 0) }},
	} {
		ev := newEvents()
		b := open(t, h, Config{OnEvent: ev.record})
		require.NoError(t, b.Enqueue(ctx, "a", ""))
		l := tryAcquire(t, b, "w")
		kctx, cancel := b.KeepAlive(ctx, l, interval)
		h.Advance(interval + interval/2) // a heartbeat was due
		// Accepted by now, or soon on a busy machine (a database's
		// heartbeat is a round trip): the KeepAlive is beating when the
		// holder ends the lease.
		eventually(t, h, string(e.reason)+": a heartbeat accepted", func() bool { return kctx.Err() != nil || stats(t, b).Heartbeats >= 1 })
		require.NoError(t, context.Cause(kctx), "%s: kept alive", e.reason)
		require.NoError(t, e.end(l))
		beats := stats(t, b).Heartbeats
		require.Error(t, kctx.Err(), "%s: the KeepAlive ctx ends as the holder's call returns", e.reason)
		var lost *leaserouter.LeaseLostError
		require.ErrorAs(t, context.Cause(kctx), &lost, "%s", e.reason)
		require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrLeaseLost)
		require.Equal(t, leaserouter.LeaseLostError{JobID: "a", Token: l.Token(), Current: l.Token(), Reason: e.reason}, *lost)
		h.Advance(2 * interval) // heartbeats were due: none is sent, none refused
		cancel()
		require.ErrorAs(t, context.Cause(kctx), &lost, "%s: cancel keeps the first cause", e.reason)
		s := stats(t, b)
		require.Zero(t, s.StaleRejections, "%s: the holder's own end is no refusal", e.reason)
		require.Zero(t, s.HeartbeatsRefused, "%s: the holder's own end is no refusal", e.reason)
		// None accepted after the end: at most the reply of one sent before
		// it was still to come when the end returned.
		require.LessOrEqual(t, s.Heartbeats, beats+1, "%s: no heartbeat accepted after the end", e.reason)
		if h.Caps().ExactClock {
			require.EqualValues(t, 1, s.Heartbeats, "%s: one heartbeat, an interval after the grant, none after the end", e.reason)
		}
		require.NoError(t, b.Close(ctx))
		for _, ev := range ev.drain() {
			require.NotEqual(t, leaserouter.EventStaleRejected, ev.Kind, "%s: no stale_rejected event: %+v", e.reason, ev)
		}
	}
}}

// ZeroLease stands for a zero lease value (&Lease{} of the backend):
// Backend.KeepAlive given it passes the backend's zero lease.
var ZeroLease Lease = zeroLease{}

type zeroLease struct{}

func (zeroLease) JobID() string                           { return "" }
func (zeroLease) Payload() string                         { return "" }
func (zeroLease) Attempt() int                            { return 0 }
func (zeroLease) Token() leaserouter.Token                { return 0 }
func (zeroLease) WorkerID() string                        { return "" }
func (zeroLease) Progress() []byte                        { return nil }
func (zeroLease) Expiry() time.Time                       { return time.Time{} }
func (zeroLease) Heartbeat(context.Context, []byte) error { return leaserouter.ErrLeaseLost }
func (zeroLease) Complete(context.Context) error          { return leaserouter.ErrLeaseLost }
func (zeroLease) Fail(context.Context, error) error       { return leaserouter.ErrLeaseLost }
func (zeroLease) Release(context.Context) error           { return leaserouter.ErrLeaseLost }

func (zeroLease) Snooze(context.Context, time.Duration) error { return leaserouter.ErrLeaseLost }
func (zeroLease) Metadata() map[string]string                 { return nil }
