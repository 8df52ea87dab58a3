package routertest

// Rows for event delivery, on every backend: the backlog's bound and its
// wait (contract.EventBacklog, BacklogFull, BacklogDrained), a hook
// calling back into the router, and the recovery of hooks that panic or
// call runtime.Goexit while the router reports.

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// eventRows are the rows of event delivery.
func eventRows() []Row {
	return []Row{rowBacklogDecidedPerCall, rowHookCallsBack, rowLoggerPanics, rowLoggerOnlyPanics, rowLoggerGoexit}
}

// rowBacklogDecidedPerCall: whether a producer of new work waits is
// decided by the backlog it finds. One that finds 16384 events
// undelivered waits until delivery has brought the backlog down to half;
// one that arrives below the bound goes on, even just after the backlog
// was full and while that first one still waits.
var rowBacklogDecidedPerCall = Row{Name: "events/a producer arriving below the bound goes on, even just after a fill", Test: func(t T, h Harness) {
	pass, free := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(free) }) }
	b := open(t, h, Config{OnEvent: func(leaserouter.Event) {
		select {
		case <-pass:
		case <-free:
		}
	}})
	t.Cleanup(unblock) // before the backend's Close, which waits for delivery
	ctx := ctxOf(t)
	enqueueAllButOne(t, b)
	require.NoError(t, b.Enqueue(ctx, "full", ""), "the 16384th event has room")
	over := make(chan error, 1)
	go func() { over <- b.Enqueue(ctx, "over", "") }()
	h.Advance(h.Lease() / 10)
	notYet(t, over, "the Enqueue that found 16384 undelivered returned")
	// Let 1000 events through the hook: at least 744 of them counted as
	// delivered (the backlog is updated every 256 events and at a batch's
	// end), so the backlog is below the bound and far above half.
	for range 1000 {
		pass <- struct{}{}
	}
	below := make(chan error, 1)
	go func() { below <- b.Enqueue(ctx, "below", "") }()
	require.NoError(t, await(t, h, "the producer arriving below the bound goes on", below))
	notYet(t, over, "the producer that found the bound returned before the backlog was down to half")
	unblock()
	require.NoError(t, await(t, h, "the waiting producer goes on once the backlog is down to half", over))
}}

// rowHookCallsBack: an OnEvent that calls back into the router while the
// backlog is full is never made to wait for room (only its own return can
// make it), and a Close it calls returns without waiting for the
// delivery it is part of; the events left are still delivered, and a
// Close from outside returns once they are.
var rowHookCallsBack = Row{Name: "events/a hook calling back into the router never waits for room, and Close from a hook returns", Test: func(t T, h Harness) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	follow, closed := make(chan error, 1), make(chan error, 1)
	var b Backend
	var delivered sync.WaitGroup
	delivered.Add(eventBacklog + 1) // every job's enqueued, follow-up's included
	b = open(t, h, Config{OnEvent: func(e leaserouter.Event) {
		if e.Kind != leaserouter.EventEnqueued {
			return
		}
		defer delivered.Done()
		if e.JobID == "j0" {
			<-release // the backlog fills behind this event
			follow <- b.Enqueue(context.Background(), "follow-up", "")
			closed <- b.Close(context.Background())
		}
	}})
	t.Cleanup(unblock) // before the backend's Close, which waits for delivery
	ctx := ctxOf(t)
	enqueueAllButOne(t, b)
	require.NoError(t, b.Enqueue(ctx, "full", ""), "the 16384th event has room")
	unblock()
	require.NoError(t, await(t, h, "an Enqueue from the hook with the backlog full returns", follow))
	require.NoError(t, await(t, h, "a Close from the hook returns", closed))
	require.NoError(t, b.Close(ctx), "Close returns once every event is delivered")
	all := make(chan struct{})
	go func() { delivered.Wait(); close(all) }()
	await(t, h, "every event was delivered, the hook's own Enqueue's included", all)
}}

// enqueueAllButOne enqueues 16383 jobs in one EnqueueMany: with a hook
// stuck on the first event, the backlog is one event short of the bound.
func enqueueAllButOne(t T, b Backend) {
	t.Helper()
	specs := make([]leaserouter.JobSpec[string], eventBacklog-1)
	for i := range specs {
		specs[i].ID = fmt.Sprint("j", i)
	}
	_, err := b.EnqueueMany(ctxOf(t), specs)
	require.NoError(t, err)
}

// misbehavingHandler is a slog.Handler that keeps every record and then,
// on a record at level Error or about job "b" (goexit: on every record),
// panics or calls runtime.Goexit.
type misbehavingHandler struct {
	LogRecorder
	goexit bool
	every  bool
}

func (h *misbehavingHandler) Handle(ctx context.Context, r slog.Record) error {
	_ = h.LogRecorder.Handle(ctx, r)
	job := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "job_id" {
			job = a.Value.String()
		}
		return true
	})
	if !h.every && r.Level < slog.LevelError && job != "b" {
		return nil
	}
	if h.goexit {
		runtime.Goexit()
	}
	panic("bad handler")
}

func (h *misbehavingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *misbehavingHandler) WithGroup(string) slog.Handler      { return h }

// useDefaultLogger makes slog.Default() log to h until the row ends (rows
// run one at a time).
func useDefaultLogger(t T, h slog.Handler) {
	prev := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(prev) })
}

// seenJobs is an OnEvent that records the job of each event, panicking
// (after recording) on job panicOn.
type seenJobs struct {
	mu   sync.Mutex
	jobs []string
}

func (s *seenJobs) hook(panicOn string) func(leaserouter.Event) {
	return func(e leaserouter.Event) {
		s.mu.Lock()
		s.jobs = append(s.jobs, e.JobID)
		s.mu.Unlock()
		if e.JobID == panicOn {
			panic("boom")
		}
	}
}

func (s *seenJobs) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.jobs)
}

// rowLoggerPanics: a Logger whose handler panics, on an event or on the
// report of OnEvent's panic, is recovered: that report goes to
// slog.Default() instead, and so does the report of the Logger's own
// panic on an event; OnEvent gets every event; every panic is counted.
var rowLoggerPanics = Row{Name: "user callbacks/a panicking Logger: reports to slog.Default, OnEvent gets every event, every panic counted", Test: func(t T, h Harness) {
	def := &LogRecorder{}
	useDefaultLogger(t, def)
	lh := &misbehavingHandler{}
	var seen seenJobs
	b := open(t, h, Config{Logger: slog.New(lh), OnEvent: seen.hook("a")})
	ctx := ctxOf(t)
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	eventually(t, h, "both reports reach slog.Default", func() bool { return len(def.Messages()) == 2 })
	require.Equal(t, []string{"leaserouter: OnEvent panicked on enqueued: boom job_id=a",
		"leaserouter: Logger handler panicked on enqueued: bad handler job_id=b"}, def.Errors())
	eventually(t, h, "the Logger gets every event", func() bool { return lh.count("enqueued") == 3 })
	require.Equal(t, []string{"a", "b", "c"}, seen.all())
	eventually(t, h, "three panics counted: OnEvent's, the Logger's on its report and on b's event", func() bool {
		return stats(t, b).CallbackPanics == 3
	})
}}

// rowLoggerOnlyPanics: with a Logger and no OnEvent, a panic of the
// Logger's handler on an event is the Logger's: reported once to
// slog.Default() as the Logger's, counted once, and the next events are
// logged.
var rowLoggerOnlyPanics = Row{Name: "user callbacks/a panicking Logger with no OnEvent: the Logger's panic, reported and counted once", Test: func(t T, h Harness) {
	def := &LogRecorder{}
	useDefaultLogger(t, def)
	lh := &misbehavingHandler{}
	b := open(t, h, Config{Logger: slog.New(lh)})
	ctx := ctxOf(t)
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	eventually(t, h, "the Logger gets every event", func() bool { return lh.count("enqueued") == 3 })
	require.NoError(t, b.Close(ctx), "Close returns once every event is delivered")
	require.Equal(t, []string{"leaserouter: Logger handler panicked on enqueued: bad handler job_id=b"}, def.Errors())
	require.Equal(t, 3, lh.count("enqueued"), "b's event logged once")
	require.EqualValues(t, 1, stats(t, b).CallbackPanics)
}}

// rowLoggerGoexit: a Logger whose handler calls runtime.Goexit (as
// t.FailNow does), while reporting OnEvent's panic or on every record,
// loses no event for OnEvent, and Close still returns once every event
// is delivered.
var rowLoggerGoexit = Row{Name: "user callbacks/a Logger calling Goexit, while reporting or on every record, loses no event", Test: func(t T, h Harness) {
	for _, every := range []bool{false, true} {
		def := &LogRecorder{}
		useDefaultLogger(t, def)
		lh := &misbehavingHandler{goexit: true, every: every}
		var seen seenJobs
		panicOn := "a"
		if every {
			panicOn = ""
		}
		b := open(t, h, Config{Logger: slog.New(lh), OnEvent: seen.hook(panicOn)})
		ctx := ctxOf(t)
		ids := []string{"a", "b", "c", "d"}
		for _, id := range ids {
			require.NoError(t, b.Enqueue(ctx, id, ""))
		}
		require.NoError(t, b.Close(ctx), "Close returns once every event is delivered")
		require.Equal(t, ids, seen.all(), "every record exits: %v", every)
		require.Equal(t, 4, lh.count("enqueued"), "the Logger got every event, every record exiting: %v", every)
	}
}}
