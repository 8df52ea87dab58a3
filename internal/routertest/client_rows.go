package routertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// The rules of a Client (NewClient, Register and its Kinds, Start, Stop,
// Drained, its queues, middleware and metadata), as rows every backend's
// Client runs (RunClient).

// ClientRow is one rule of a Client, as Row is of a Router.
type ClientRow struct {
	Name      string
	Needs     string // a capability, as Row.Needs
	Unbubbled bool   // as Row.Unbubbled
	Test      func(t T, h ClientHarness)
}

// ClientRows returns the Client's rows.
func ClientRows() []ClientRow {
	rows := []ClientRow{
		rowKindStored, rowKindOnlyRegistered, rowKindRunsWhenKnown,
		rowQueueOrder, rowQueueWorkers, rowQueueIsolated, rowQueueRouting, rowQueueUniqueID, rowQueueEnqueueMany,
		rowStartTwice, rowStopDrains, rowStopBounded, rowRegisterRefused, rowEnqueueBeforeStart, rowDrained,
		rowClientOptions,
		rowMiddlewareAround, rowMiddlewareOutcome, rowMiddlewarePanic, rowMiddlewareCtx, rowAttemptFields,
		rowClientMetadataKept, rowMetadataLimits, rowMetadataMerge,
		rowClientTokens, rowClientQueueStats, rowClientEvents,
	}
	return append(rows, clientPeriodicRows()...)
}

// RunClient runs every Client row against h, each as a subtest in
// h.Scope (a row needing a capability h lacks is logged as not
// applicable).
func RunClient(t *testing.T, h ClientHarness) {
	for _, row := range ClientRows() {
		t.Run(row.Name, func(t *testing.T) {
			if ok, why := needs(h.Caps(), row.Needs); !ok {
				t.Logf("not applicable on %s (needs %s): %s", h.Name(), row.Needs, why)
				return
			}
			if row.Unbubbled {
				row.Test(t, h)
				return
			}
			h.Scope(t, func(t *testing.T) { row.Test(t, h) })
		})
	}
}

func newClient(t T, h ClientHarness, cfg ClientConfig) Client {
	t.Helper()
	c, err := h.NewClient(t, cfg)
	require.NoError(t, err)
	return c
}

func register(t T, c Client, kind string, hd Handler, opts ...leaserouter.KindOption) Kind {
	t.Helper()
	k, err := c.Register(kind, hd, opts...)
	require.NoError(t, err)
	return k
}

func noop(context.Context, Lease) error { return nil }

func queueGet(t T, c Client, queue, id string) leaserouter.Job[string] {
	t.Helper()
	q := c.Queue(queue)
	require.NotNil(t, q, "queue %q", queue)
	j, ok, err := q.Get(ctxOf(t), id)
	require.NoError(t, err)
	require.True(t, ok, "job %q known in queue %q", id, queue)
	return j
}

func drained(t T, c Client) {
	t.Helper()
	require.NoError(t, c.Drained(ctxOf(t)))
}

// recorder is a list of strings appended to from handlers.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

var rowKindStored = ClientRow{Name: "kind/stored with the job: Job.Kind, List by Kinds in every state, leased too", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{})
	ctx := ctxOf(t)
	held, release := make(chan struct{}), make(chan struct{})
	a := register(t, c, "a", func(_ context.Context, l Lease) error {
		if l.JobID() == "x" {
			close(held)
			<-release
		}
		return nil
	})
	b := register(t, c, "b", noop)
	require.Equal(t, "a", a.Name())
	require.Equal(t, leaserouter.DefaultQueue, a.Queue())
	require.NoError(t, a.Enqueue(ctx, "x", "px"))
	require.NoError(t, b.Enqueue(ctx, "y", "py"))
	require.NoError(t, a.Enqueue(ctx, "z", "pz"))
	x := queueGet(t, c, leaserouter.DefaultQueue, "x")
	require.Equal(t, "a", x.Kind)
	require.Equal(t, "px", x.Payload)
	require.Equal(t, "b", queueGet(t, c, leaserouter.DefaultQueue, "y").Kind)
	listed := func(p leaserouter.ListParams) map[string]leaserouter.State {
		t.Helper()
		page, err := c.Queue(leaserouter.DefaultQueue).List(ctx, p)
		require.NoError(t, err)
		got := map[string]leaserouter.State{}
		for _, j := range page.Jobs {
			require.Contains(t, p.Kinds, j.Kind, "job %q", j.ID)
			got[j.ID] = j.State
		}
		return got
	}
	pending := leaserouter.StatePending
	require.Equal(t, map[string]leaserouter.State{"x": pending, "z": pending}, listed(leaserouter.ListParams{Kinds: []string{"a"}}))
	require.NoError(t, c.Start(ctx))
	<-held
	leased := []leaserouter.State{leaserouter.StateLeased}
	got := listed(leaserouter.ListParams{Kinds: []string{"a"}, States: leased})
	require.Equal(t, leaserouter.StateLeased, got["x"], "a leased job listed by its kind")
	delete(got, "z") // z may be leased too, or done already
	require.Len(t, got, 1, "only the kind's leased jobs")
	require.NotContains(t, listed(leaserouter.ListParams{Kinds: []string{"b"}, States: leased}), "x", "and not by another")
	require.Equal(t, leaserouter.StateLeased, listed(leaserouter.ListParams{Kinds: []string{"a", "b"}})["x"])
	close(release)
	drained(t, c)
	require.Equal(t, "a", queueGet(t, c, leaserouter.DefaultQueue, "x").Kind, "kept once finished")
	done := leaserouter.StateSucceeded
	require.Equal(t, map[string]leaserouter.State{"x": done, "z": done},
		listed(leaserouter.ListParams{Kinds: []string{"a"}, States: []leaserouter.State{done}}))
}}

var rowKindOnlyRegistered = ClientRow{Name: "kind/a process claims only the kinds it registered; no attempt counted on a kind it lacks", Needs: "SharedClients", Test: func(t T, h ClientHarness) {
	ctx := ctxOf(t)
	full := newClient(t, h, ClientConfig{}) // knows x and y; not started
	fx := register(t, full, "x", noop)
	fy := register(t, full, "y", noop)
	part, err := h.Peer(t, full, ClientConfig{}) // knows x only
	require.NoError(t, err)
	register(t, part, "x", noop)
	require.NoError(t, fy.Enqueue(ctx, "y1", ""))
	require.NoError(t, fx.Enqueue(ctx, "x1", ""))
	require.NoError(t, part.Start(ctx))
	eventually(t, h, "x1 done by the process that knows x", func() bool {
		return queueGet(t, part, leaserouter.DefaultQueue, "x1").State == leaserouter.StateSucceeded
	})
	h.Advance(h.Lease())
	y := queueGet(t, part, leaserouter.DefaultQueue, "y1")
	require.Equal(t, leaserouter.StatePending, y.State, "a kind no running process knows waits")
	require.Zero(t, y.Attempt, "and burns no attempt")
}}

var rowKindRunsWhenKnown = ClientRow{Name: "kind/a job of a kind no running process knows runs once a process registering it starts", Needs: "SharedClients", Test: func(t T, h ClientHarness) {
	ctx := ctxOf(t)
	part := newClient(t, h, ClientConfig{})
	register(t, part, "x", noop)
	require.NoError(t, part.Start(ctx))
	full, err := h.Peer(t, part, ClientConfig{})
	require.NoError(t, err)
	register(t, full, "x", noop)
	fy := register(t, full, "y", noop)
	require.NoError(t, fy.Enqueue(ctx, "y1", ""))
	h.Advance(h.Lease())
	require.Equal(t, leaserouter.StatePending, queueGet(t, part, leaserouter.DefaultQueue, "y1").State)
	require.NoError(t, full.Start(ctx))
	eventually(t, h, "y1 run by the process that knows y", func() bool {
		return queueGet(t, part, leaserouter.DefaultQueue, "y1").State == leaserouter.StateSucceeded
	})
	require.Equal(t, 1, queueGet(t, part, leaserouter.DefaultQueue, "y1").Attempt)
}}

var rowQueueOrder = ClientRow{Name: "queue/one claim serves every kind in the queue's order (priority, ready time, enqueue order)", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q": {Workers: 1}}})
	ctx := ctxOf(t)
	var ran recorder
	hd := func(_ context.Context, l Lease) error { ran.add(l.JobID()); return nil }
	ks := []Kind{register(t, c, "a", hd, leaserouter.WithKindQueue("q")), register(t, c, "b", hd, leaserouter.WithKindQueue("q")), register(t, c, "c", hd, leaserouter.WithKindQueue("q"))}
	// A scheduled job becomes ready after the jobs below were enqueued:
	// its ready time puts it after them at its priority.
	require.NoError(t, ks[2].Enqueue(ctx, "late", "", leaserouter.WithDelay(time.Second)))
	h.Advance(2 * time.Second)
	jobs := []struct {
		kind int
		id   string
		prio int
	}{{0, "a1", 0}, {1, "b1", 5}, {2, "c1", 0}, {0, "a2", 5}, {1, "b2", 0}, {2, "c2", 9}}
	for _, j := range jobs {
		require.NoError(t, ks[j.kind].Enqueue(ctx, j.id, "", leaserouter.WithPriority(j.prio)))
	}
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	require.Equal(t, []string{"c2", "b1", "a2", "late", "a1", "c1", "b2"}, ran.list())
}}

var rowQueueWorkers = ClientRow{Name: "queue/Workers bound a queue's running handlers across its kinds", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{leaserouter.DefaultQueue: {Workers: 2}}})
	ctx := ctxOf(t)
	release := make(chan struct{})
	var running, most atomic.Int32
	hd := func(ctx context.Context, _ Lease) error {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		defer running.Add(-1)
		<-release
		return nil
	}
	a, b := register(t, c, "a", hd), register(t, c, "b", hd)
	for i := range 3 {
		require.NoError(t, a.Enqueue(ctx, fmt.Sprint("a", i), ""))
		require.NoError(t, b.Enqueue(ctx, fmt.Sprint("b", i), ""))
	}
	require.NoError(t, c.Start(ctx))
	eventually(t, h, "two handlers running", func() bool { return running.Load() == 2 })
	h.Advance(h.Lease() / 4)
	require.EqualValues(t, 2, running.Load(), "no third handler while two run")
	close(release)
	drained(t, c)
	require.EqualValues(t, 2, most.Load())
}}

var rowQueueIsolated = ClientRow{Name: "queue/a queue whose workers are all busy does not hold back another queue", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"slow": {Workers: 1}, "fast": {Workers: 1}}})
	ctx := ctxOf(t)
	release := make(chan struct{})
	slow := register(t, c, "slow", func(context.Context, Lease) error { <-release; return nil }, leaserouter.WithKindQueue("slow"))
	fast := register(t, c, "fast", noop, leaserouter.WithKindQueue("fast"))
	require.NoError(t, slow.Enqueue(ctx, "s1", ""))
	require.NoError(t, slow.Enqueue(ctx, "s2", ""))
	for i := range 5 {
		require.NoError(t, fast.Enqueue(ctx, fmt.Sprint("f", i), ""))
	}
	require.NoError(t, c.Start(ctx))
	eventually(t, h, "the fast queue done while the slow one is busy", func() bool {
		for i := range 5 {
			if queueGet(t, c, "fast", fmt.Sprint("f", i)).State != leaserouter.StateSucceeded {
				return false
			}
		}
		return true
	})
	require.Equal(t, leaserouter.StatePending, queueGet(t, c, "slow", "s2").State)
	close(release)
	drained(t, c)
}}

var rowQueueRouting = ClientRow{Name: "queue/WithKindQueue and WithQueue route a job; an unconfigured queue: ErrInvalidOptions at Register, ErrInvalidJob at Enqueue", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q1": {}, "q2": {}}})
	ctx := ctxOf(t)
	_, err := c.Register("nowhere", noop) // DefaultQueue is not configured
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	_, err = c.Register("nowhere", noop, leaserouter.WithKindQueue("q3"))
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.ErrorContains(t, err, "q3")
	k := register(t, c, "k", noop, leaserouter.WithKindQueue("q1"))
	require.Equal(t, "q1", k.Queue())
	require.NoError(t, k.Enqueue(ctx, "in1", ""))
	require.NoError(t, k.Enqueue(ctx, "in2", "", leaserouter.WithQueue("q2")))
	err = k.Enqueue(ctx, "in3", "", leaserouter.WithQueue("q3"))
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, "q3")
	require.Equal(t, "k", queueGet(t, c, "q1", "in1").Kind)
	require.Equal(t, "k", queueGet(t, c, "q2", "in2").Kind)
	_, ok, err := c.Queue("q1").Get(ctx, "in2")
	require.NoError(t, err)
	require.False(t, ok, "WithQueue's job is in that queue only")
	require.Nil(t, c.Queue("q3"))
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	require.Equal(t, leaserouter.StateSucceeded, queueGet(t, c, "q2", "in2").State)
}}

var rowQueueUniqueID = ClientRow{Name: "queue/a job ID is unique within its queue: across kinds ErrDuplicate, across queues allowed", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q1": {}, "q2": {}}})
	ctx := ctxOf(t)
	a := register(t, c, "a", noop, leaserouter.WithKindQueue("q1"))
	b := register(t, c, "b", noop, leaserouter.WithKindQueue("q1"))
	require.NoError(t, a.Enqueue(ctx, "x", "from a"))
	require.ErrorIs(t, b.Enqueue(ctx, "x", "from b"), leaserouter.ErrDuplicate)
	require.NoError(t, b.Enqueue(ctx, "x", "from b", leaserouter.WithQueue("q2")))
	require.Equal(t, "from a", queueGet(t, c, "q1", "x").Payload)
	require.Equal(t, "b", queueGet(t, c, "q2", "x").Kind)
}}

var rowQueueEnqueueMany = ClientRow{Name: "queue/EnqueueMany goes to one queue: a disagreeing WithQueue names its index, nothing enqueued", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q1": {}, "q2": {}}})
	ctx := ctxOf(t)
	k := register(t, c, "k", noop, leaserouter.WithKindQueue("q1"))
	_, err := k.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "m0"}, {ID: "m1"}, {ID: "m2", Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("q2")}}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, "batch index 2")
	for _, q := range []string{"q1", "q2"} {
		s, err := c.Queue(q).Stats(ctx)
		require.NoError(t, err)
		require.Zero(t, s.Enqueued, "nothing enqueued in %s", q)
	}
	dups, err := k.EnqueueMany(ctx, []leaserouter.JobSpec[string]{
		{ID: "m0", Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("q2")}},
		{ID: "m1", Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("q2")}}, {ID: "m0", Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("q2")}}})
	require.NoError(t, err)
	require.Equal(t, []int{2}, dups)
	require.Equal(t, "k", queueGet(t, c, "q2", "m1").Kind)
	_, err = k.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "n0", Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("q3")}}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, "batch index 0")
}}

var rowStartTwice = ClientRow{Name: "lifecycle/Start twice is an error, Start after Stop ErrClosed", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{})
	ctx := ctxOf(t)
	register(t, c, "a", noop)
	require.NoError(t, c.Start(ctx))
	require.ErrorIs(t, c.Start(ctx), leaserouter.ErrInvalidOptions)
	require.NoError(t, c.Stop(ctx))
	require.ErrorIs(t, c.Start(ctx), leaserouter.ErrClosed)
	c2 := newClient(t, h, ClientConfig{})
	require.NoError(t, c2.Stop(ctx), "Stop of a Client never started")
	require.ErrorIs(t, c2.Start(ctx), leaserouter.ErrClosed)
}}

var rowStopDrains = ClientRow{Name: "lifecycle/Stop is idempotent (a concurrent Stop waits for the first), lets running handlers finish, starts nothing new", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{leaserouter.DefaultQueue: {Workers: 1}}})
	ctx := ctxOf(t)
	started, release := make(chan struct{}), make(chan struct{})
	var ran recorder
	k := register(t, c, "a", func(ctx context.Context, l Lease) error {
		ran.add(l.JobID())
		if l.JobID() == "first" {
			close(started)
			<-release
		}
		return nil
	})
	require.NoError(t, k.Enqueue(ctx, "first", ""))
	require.NoError(t, k.Enqueue(ctx, "second", ""))
	require.NoError(t, c.Start(ctx))
	<-started
	// Two Stops at once: whichever is second waits for the first.
	stopped := make(chan error, 2)
	go func() { stopped <- c.Stop(ctx) }()
	go func() { stopped <- c.Stop(ctx) }()
	h.Advance(h.Lease() / 2)
	select {
	case err := <-stopped:
		close(release) // the handler ends: no goroutine left behind the failure
		t.Errorf("Stop returned %v while a handler ran", err)
		t.FailNow()
	default:
	}
	require.ErrorIs(t, k.Enqueue(ctx, "third", ""), leaserouter.ErrClosed, "Stop refuses new jobs at once")
	close(release)
	require.NoError(t, <-stopped)
	require.NoError(t, <-stopped)
	require.NoError(t, c.Stop(ctx), "again")
	require.Equal(t, []string{"first"}, ran.list())
	require.Equal(t, leaserouter.StateSucceeded, queueGet(t, c, leaserouter.DefaultQueue, "first").State)
	second := queueGet(t, c, leaserouter.DefaultQueue, "second")
	require.Equal(t, leaserouter.StatePending, second.State)
	require.Zero(t, second.Attempt)
}}

var rowStopBounded = ClientRow{Name: "lifecycle/Stop returns within 100 ms of its ctx's end, revoking what is held", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q1": {}, "q2": {}, "q3": {}}})
	ctx := ctxOf(t)
	causes := make(chan error, 3)
	var started sync.WaitGroup
	for _, q := range []string{"q1", "q2", "q3"} {
		k := register(t, c, "k"+q, func(ctx context.Context, l Lease) error {
			started.Done()
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}, leaserouter.WithKindQueue(q))
		started.Add(1)
		require.NoError(t, k.Enqueue(ctx, "held", ""))
	}
	require.NoError(t, c.Start(ctx))
	started.Wait()
	const grace = time.Second
	stopCtx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	begun := time.Now()
	err := c.Stop(stopCtx)
	took := time.Since(begun)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// 100 ms on an exact clock, which also tells the queues closed at once
	// from one after another; on a real one (a busy machine's scheduler
	// between ctx's end and Stop's return), generously: a Stop that waits
	// past its ctx for the handlers still fails.
	bound := 100 * time.Millisecond
	if !h.Caps().ExactClock {
		bound = grace / 2
	}
	require.Less(t, took, grace+bound, "Stop's bound, the queues closed at once")
	for range 3 {
		require.ErrorIs(t, <-causes, leaserouter.ErrLeaseLost)
	}
	for _, q := range []string{"q1", "q2", "q3"} {
		j := queueGet(t, c, q, "held")
		require.Equal(t, leaserouter.StatePending, j.State, "revoked")
		require.Equal(t, 1, j.Attempt)
	}
}}

var rowRegisterRefused = ClientRow{Name: "lifecycle/Register after Start, twice, with a bad name, a nil handler or an unknown queue: ErrInvalidOptions", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{})
	ctx := ctxOf(t)
	register(t, c, "a", noop)
	for name, try := range map[string]func() error{
		"twice":         func() error { _, err := c.Register("a", noop); return err },
		"empty name":    func() error { _, err := c.Register("", noop); return err },
		"NUL in name":   func() error { _, err := c.Register("a\x00b", noop); return err },
		"invalid UTF-8": func() error { _, err := c.Register("a\xffb", noop); return err },
		"too long":      func() error { _, err := c.Register(strings.Repeat("k", leaserouter.MaxIDBytes+1), noop); return err },
		"nil handler":   func() error { _, err := c.Register("b", nil); return err },
		"unknown queue": func() error { _, err := c.Register("b", noop, leaserouter.WithKindQueue("elsewhere")); return err },
	} {
		require.ErrorIs(t, try(), leaserouter.ErrInvalidOptions, name)
	}
	register(t, c, "b", noop) // none of the refusals registered b
	require.NoError(t, c.Start(ctx))
	_, err := c.Register("c", noop)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "after Start")
}}

var rowEnqueueBeforeStart = ClientRow{Name: "lifecycle/Enqueue before Start waits for Start", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{})
	ctx := ctxOf(t)
	k := register(t, c, "a", noop)
	require.NoError(t, k.Enqueue(ctx, "early", "p"))
	h.Advance(h.Lease())
	j := queueGet(t, c, leaserouter.DefaultQueue, "early")
	require.Equal(t, leaserouter.StatePending, j.State)
	require.Zero(t, j.Attempt)
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	require.Equal(t, leaserouter.StateSucceeded, queueGet(t, c, leaserouter.DefaultQueue, "early").State)
}}

var rowDrained = ClientRow{Name: "lifecycle/Drained waits for pending, scheduled and leased jobs of every queue, a handler's follow-up included", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q1": {}, "q2": {}}})
	ctx := ctxOf(t)
	var ran recorder
	var next Kind
	first := register(t, c, "first", func(ctx context.Context, l Lease) error {
		ran.add(l.JobID())
		h.Advance(h.Lease() / 10) // leased a while
		return next.Enqueue(ctx, "then-"+l.JobID(), "", leaserouter.WithDelay(time.Second))
	}, leaserouter.WithKindQueue("q2"))
	// The follow-up goes to a queue a Drained may have seen empty before.
	next = register(t, c, "next", func(_ context.Context, l Lease) error { ran.add(l.JobID()); return nil }, leaserouter.WithKindQueue("q1"))
	require.NoError(t, first.Enqueue(ctx, "j", ""))
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	require.ErrorIs(t, c.Drained(short), context.DeadlineExceeded, "not started: the job waits")
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	require.Equal(t, []string{"j", "then-j"}, ran.list(), "drained only once the follow-up ran")
	require.Equal(t, leaserouter.StateSucceeded, queueGet(t, c, "q1", "then-j").State)
	drained(t, c) // and at once when nothing is left
}}

var rowClientOptions = ClientRow{Name: "options/NewClient refuses negative Workers and a bad per-queue option, naming the queue", Test: func(t T, h ClientHarness) {
	for name, cfg := range map[string]ClientConfig{
		"negative Workers":           {Queues: map[string]QueueConfig{"badq": {Workers: -1}}},
		"negative LeaseDuration":     {Queues: map[string]QueueConfig{"badq": {Config: Config{LeaseDuration: -time.Second}}}},
		"negative MaxAttempts":       {Queues: map[string]QueueConfig{"ok": {}, "badq": {Config: Config{MaxAttempts: -1}}}},
		"negative Timeout":           {Queues: map[string]QueueConfig{"badq": {Timeout: -time.Second}}},
		"client's bad LeaseDuration": {Config: Config{LeaseDuration: -time.Second}, Queues: map[string]QueueConfig{"badq": {}}},
	} {
		_, err := h.NewClient(t, cfg)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, name)
		require.ErrorContains(t, err, "badq", name)
	}
	for name, q := range map[string]string{"empty": "", "NUL": "a\x00", "too long": strings.Repeat("q", leaserouter.MaxIDBytes+1)} {
		_, err := h.NewClient(t, ClientConfig{Queues: map[string]QueueConfig{q: {}}})
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "queue name %s", name)
	}
}}

var rowMiddlewareAround = ClientRow{Name: "middleware/runs around each attempt, outermost first, inside the lease", Test: func(t T, h ClientHarness) {
	var rec recorder
	var c Client
	mw := func(name string) leaserouter.Middleware {
		return func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
			j := queueGet(t, c, a.Queue, a.JobID)
			rec.add(fmt.Sprintf("%s in %s %v", name, a.JobID, j.State))
			err := next(ctx)
			rec.add(name + " out")
			return err
		}
	}
	c = newClient(t, h, ClientConfig{Middleware: []leaserouter.Middleware{mw("outer"), mw("inner")}})
	ctx := ctxOf(t)
	k := register(t, c, "a", func(_ context.Context, l Lease) error { rec.add("handler " + l.JobID()); return nil })
	require.NoError(t, k.Enqueue(ctx, "x", ""))
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	require.Equal(t, []string{"outer in x leased", "inner in x leased", "handler x", "inner out", "outer out"}, rec.list())
}}

var rowMiddlewareOutcome = ClientRow{Name: "middleware/its result is the outcome: nil completes, Snooze snoozes, Permanent is dead, an error retries", Test: func(t T, h ClientHarness) {
	var calls atomic.Int32
	mw := func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
		err := next(ctx)
		require.Error(t, err, "the handler's error, to the middleware")
		switch a.JobID {
		case "done":
			return nil // whatever the handler said
		case "snooze":
			return leaserouter.Snooze(time.Hour)
		case "dead":
			return leaserouter.Permanent(errBoom)
		}
		return errBoom
	}
	c := newClient(t, h, ClientConfig{Config: Config{MaxAttempts: 2, Backoff: func(int) time.Duration { return time.Hour }}, Middleware: []leaserouter.Middleware{mw}})
	ctx := ctxOf(t)
	k := register(t, c, "a", func(context.Context, Lease) error { calls.Add(1); return errors.New("the handler's") })
	for _, id := range []string{"done", "snooze", "dead", "retry"} {
		require.NoError(t, k.Enqueue(ctx, id, ""))
	}
	require.NoError(t, c.Start(ctx))
	eventually(t, h, "four attempts", func() bool { return calls.Load() == 4 })
	get := func(id string) leaserouter.Job[string] { return queueGet(t, c, leaserouter.DefaultQueue, id) }
	// Each outcome reaches the job set on its own path (a success rides
	// the next claim, a failure is sent at once), so wait for all four.
	eventually(t, h, "every outcome applied", func() bool {
		return get("retry").State == leaserouter.StateScheduled && get("done").State == leaserouter.StateSucceeded &&
			get("snooze").State == leaserouter.StateScheduled && get("dead").State == leaserouter.StateDead
	})
	require.Equal(t, leaserouter.StateSucceeded, get("done").State)
	s := get("snooze")
	require.Equal(t, leaserouter.StateScheduled, s.State)
	require.Zero(t, s.Attempt, "a snooze counts no attempt")
	d := get("dead")
	require.Equal(t, leaserouter.StateDead, d.State)
	require.Contains(t, d.LastError, "boom")
	r := get("retry")
	require.Equal(t, 1, r.Attempt)
	require.Contains(t, r.LastError, "boom")
}}

var rowMiddlewarePanic = ClientRow{Name: "middleware/a panic in a middleware is the attempt's panic", Test: func(t T, h ClientHarness) {
	var handled atomic.Bool
	mw := func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
		if a.JobID == "p" {
			panic("middleware went wrong")
		}
		return next(ctx)
	}
	c := newClient(t, h, ClientConfig{Config: Config{MaxAttempts: 1}, Middleware: []leaserouter.Middleware{mw}})
	ctx := ctxOf(t)
	k := register(t, c, "a", func(context.Context, Lease) error { handled.Store(true); return nil })
	require.NoError(t, k.Enqueue(ctx, "p", ""))
	require.NoError(t, k.Enqueue(ctx, "fine", ""))
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	p := queueGet(t, c, leaserouter.DefaultQueue, "p")
	require.Equal(t, leaserouter.StateDead, p.State, "the attempt failed (the last one: dead)")
	require.Contains(t, p.LastError, "middleware went wrong")
	require.Contains(t, p.LastError, "panic")
	require.Equal(t, leaserouter.StateSucceeded, queueGet(t, c, leaserouter.DefaultQueue, "fine").State, "and the workers went on")
	require.True(t, handled.Load())
}}

var rowMiddlewareCtx = ClientRow{Name: "middleware/its ctx is the handler's: canceled with ErrLeaseLost when the lease is lost", Test: func(t T, h ClientHarness) {
	inMW, inHandler := make(chan error, 1), make(chan error, 1)
	began := make(chan struct{})
	mw := func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
		err := next(ctx)
		inMW <- context.Cause(ctx)
		return err
	}
	c := newClient(t, h, ClientConfig{Middleware: []leaserouter.Middleware{mw}})
	ctx := ctxOf(t)
	k := register(t, c, "a", func(ctx context.Context, l Lease) error {
		close(began)
		<-ctx.Done()
		inHandler <- context.Cause(ctx)
		return ctx.Err()
	})
	require.NoError(t, k.Enqueue(ctx, "x", ""))
	require.NoError(t, c.Start(ctx))
	<-began
	require.NoError(t, c.Queue(leaserouter.DefaultQueue).Cancel(ctx, "x"))
	require.ErrorIs(t, <-inHandler, leaserouter.ErrLeaseLost)
	require.ErrorIs(t, <-inMW, leaserouter.ErrLeaseLost, "the middleware's ctx is canceled with the handler's")
	drained(t, c)
	require.Equal(t, leaserouter.StateCanceled, queueGet(t, c, leaserouter.DefaultQueue, "x").State)
}}

var rowAttemptFields = ClientRow{Name: "attempt/Attempt carries kind, queue, job ID, attempt, token and metadata", Test: func(t T, h ClientHarness) {
	attempts := make(chan leaserouter.Attempt, 4)
	leases := make(chan Lease, 4)
	mw := func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
		attempts <- a
		return next(ctx)
	}
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q": {}}, Middleware: []leaserouter.Middleware{mw}})
	ctx := ctxOf(t)
	k := register(t, c, "kind-a", func(_ context.Context, l Lease) error {
		leases <- l
		if l.Attempt() == 1 {
			return errBoom
		}
		return nil
	}, leaserouter.WithKindQueue("q"))
	md := map[string]string{"tenant": "t1"}
	require.NoError(t, k.Enqueue(ctx, "x", "", leaserouter.WithMetadata(md)))
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	for want := 1; want <= 2; want++ {
		a, l := <-attempts, <-leases
		require.Equal(t, leaserouter.Attempt{Kind: "kind-a", Queue: "q", JobID: "x", Attempt: want, Token: l.Token(), Metadata: md}, a)
		require.Equal(t, want, l.Attempt())
	}
}}

var rowClientMetadataKept = ClientRow{Name: "metadata/read back in Job, Attempt and Lease; kept across attempts, Snooze and Retry", Test: func(t T, h ClientHarness) {
	md := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "t1"}
	seen := make(chan map[string]string, 16)
	var attempt atomic.Int32
	mw := func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
		seen <- a.Metadata
		return next(ctx)
	}
	c := newClient(t, h, ClientConfig{Config: Config{MaxAttempts: 2}, Middleware: []leaserouter.Middleware{mw}})
	ctx := ctxOf(t)
	k := register(t, c, "a", func(_ context.Context, l Lease) error {
		seen <- offersLeaseMetadata(t, l)
		switch attempt.Add(1) {
		case 1:
			return errBoom // a failed attempt
		case 2:
			return leaserouter.Snooze(0)
		case 3:
			return leaserouter.Permanent(errBoom) // dead, then retried
		}
		return nil
	})
	require.NoError(t, k.Enqueue(ctx, "x", "", leaserouter.WithMetadata(md)))
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	q := c.Queue(leaserouter.DefaultQueue)
	require.Equal(t, leaserouter.StateDead, queueGet(t, c, leaserouter.DefaultQueue, "x").State)
	require.Equal(t, md, queueGet(t, c, leaserouter.DefaultQueue, "x").Metadata)
	require.NoError(t, q.Retry(ctx, "x"))
	drained(t, c)
	j := queueGet(t, c, leaserouter.DefaultQueue, "x")
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	require.Equal(t, md, j.Metadata, "Job.Metadata")
	require.Len(t, seen, 8, "four attempts, each seen by the middleware and the handler")
	for range 8 {
		require.Equal(t, md, <-seen)
	}
}}

// offersLeaseMetadata is l's metadata (MetadataLease).
func offersLeaseMetadata(t T, l Lease) map[string]string {
	m, ok := l.(MetadataLease)
	if !ok {
		t.Errorf("the Client's lease %T has no Metadata", l)
		t.FailNow()
	}
	return m.Metadata()
}

var rowMetadataLimits = ClientRow{Name: "metadata/over 64 pairs or 4 KiB, an empty key or a NUL: ErrInvalidJob, naming the batch index", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{})
	ctx := ctxOf(t)
	k := register(t, c, "a", noop)
	many := map[string]string{}
	for i := range leaserouter.MaxMetadataPairs + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	atMost := maps.Clone(many)
	delete(atMost, "k0")
	big := map[string]string{"k": strings.Repeat("v", leaserouter.MaxMetadataBytes)}
	for name, md := range map[string]map[string]string{
		"too many pairs": many, "too many bytes": big, "empty key": {"": "v"}, "NUL in a value": {"k": "a\x00"}, "NUL in a key": {"k\x00": "v"},
	} {
		require.ErrorIs(t, k.Enqueue(ctx, "bad", "", leaserouter.WithMetadata(md)), leaserouter.ErrInvalidJob, name)
		_, err := k.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "ok"}, {ID: "bad", Options: []leaserouter.EnqueueOption{leaserouter.WithMetadata(md)}}})
		require.ErrorIs(t, err, leaserouter.ErrInvalidJob, name)
		require.ErrorContains(t, err, "batch index 1", name)
	}
	s, err := c.Queue(leaserouter.DefaultQueue).Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, s.Enqueued, "nothing enqueued")
	require.NoError(t, k.Enqueue(ctx, "limit", "", leaserouter.WithMetadata(atMost)), "64 pairs")
	require.NoError(t, k.Enqueue(ctx, "bytes", "", leaserouter.WithMetadata(map[string]string{"k": strings.Repeat("v", leaserouter.MaxMetadataBytes-1)})), "4 KiB")
}}

var rowMetadataMerge = ClientRow{Name: "metadata/WithMetadata options merge, later keys win; the caller's map is copied at the call", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{})
	ctx := ctxOf(t)
	k := register(t, c, "a", noop)
	mine := map[string]string{"a": "1", "b": "1"}
	opt := leaserouter.WithMetadata(mine)
	mine["a"], mine["z"] = "changed", "added"
	require.NoError(t, k.Enqueue(ctx, "x", "", opt, leaserouter.WithMetadata(map[string]string{"b": "2", "c": "2"}), leaserouter.WithMetadata(nil)))
	require.Equal(t, map[string]string{"a": "1", "b": "2", "c": "2"}, queueGet(t, c, leaserouter.DefaultQueue, "x").Metadata)
	require.NoError(t, k.Enqueue(ctx, "none", ""))
	require.Nil(t, queueGet(t, c, leaserouter.DefaultQueue, "none").Metadata)
}}

var rowClientTokens = ClientRow{Name: "tokens/strictly increasing across every queue of a Client", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q1": {Workers: 1}, "q2": {Workers: 1}, "q3": {Workers: 1}}})
	ctx := ctxOf(t)
	var mu sync.Mutex
	var tokens []leaserouter.Token
	hd := func(_ context.Context, l Lease) error {
		mu.Lock()
		defer mu.Unlock()
		tokens = append(tokens, l.Token())
		return nil
	}
	ks := []Kind{register(t, c, "k1", hd, leaserouter.WithKindQueue("q1")), register(t, c, "k2", hd, leaserouter.WithKindQueue("q2")), register(t, c, "k3", hd, leaserouter.WithKindQueue("q3"))}
	require.NoError(t, c.Start(ctx))
	// One job at a time, each in the next queue: each lease is granted
	// after the one before it, so its token is higher (a Fence key written
	// from several queues still orders).
	for i := range 9 {
		require.NoError(t, ks[i%3].Enqueue(ctx, fmt.Sprint("j", i), ""))
		drained(t, c)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, tokens, 9)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "token %d of %v", i, tokens)
	}
}}

var rowClientQueueStats = ClientRow{Name: "stats/QueueStats reports every configured queue by name", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"zeta": {}, "alpha": {}, "mid": {}}})
	ctx := ctxOf(t)
	a := register(t, c, "a", noop, leaserouter.WithKindQueue("alpha"))
	z := register(t, c, "z", noop, leaserouter.WithKindQueue("zeta"))
	require.NoError(t, a.Enqueue(ctx, "1", ""))
	require.NoError(t, a.Enqueue(ctx, "2", ""))
	require.NoError(t, z.Enqueue(ctx, "1", ""))
	require.Equal(t, []string{"alpha", "mid", "zeta"}, c.QueueNames())
	qs, err := c.QueueStats(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 3)
	for i, want := range []struct {
		name    string
		pending int
	}{{"alpha", 2}, {"mid", 0}, {"zeta", 1}} {
		require.Equal(t, want.name, qs[i].Queue)
		require.Equal(t, want.pending, qs[i].Stats.Pending, want.name)
		require.Equal(t, want.name, c.Queue(want.name).Name())
	}
}}

var rowClientEvents = ClientRow{Name: "events/a Client's OnEvent calls are serial across queues and carry Queue and JobKind", Test: func(t T, h ClientHarness) {
	var inside, overlaps atomic.Int32
	evs := newEvents()
	onEvent := func(e leaserouter.Event) {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inside.Add(-1)
		h.Advance(time.Millisecond) // a slow hook: another queue's call would come in now
		evs.record(e)
	}
	qs := map[string]QueueConfig{"q1": {}, "q2": {}, "q3": {}}
	c := newClient(t, h, ClientConfig{Config: Config{OnEvent: onEvent}, Queues: qs})
	ctx := ctxOf(t)
	for _, q := range []string{"q1", "q2", "q3"} {
		k := register(t, c, "kind-"+q, noop, leaserouter.WithKindQueue(q))
		for i := range 5 {
			require.NoError(t, k.Enqueue(ctx, fmt.Sprint(q, "-", i), ""))
		}
	}
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	require.NoError(t, c.Stop(ctx)) // every event delivered
	got := evs.drain()
	require.NotEmpty(t, got)
	completed := 0
	for _, e := range got {
		q, _, _ := strings.Cut(e.JobID, "-")
		require.Equal(t, q, e.Queue, "%v of %s", e.Kind, e.JobID)
		require.Equal(t, "kind-"+q, e.JobKind, "%v of %s", e.Kind, e.JobID)
		if e.Kind == leaserouter.EventCompleted {
			completed++
		}
	}
	require.Equal(t, 15, completed)
	require.Zero(t, overlaps.Load(), "OnEvent called for two queues at once")
}}
