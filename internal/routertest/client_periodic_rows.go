package routertest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// Periodic jobs of a Client's Kind (Kind.AddPeriodic, RemovePeriodic): the
// queue's Router's periodic jobs, whose ticks are jobs of the Kind. The
// rules of the ticks themselves are the periodic rows' (periodic_rows.go).

func clientPeriodicRows() []ClientRow {
	return []ClientRow{rowKindPeriodicTicks, rowKindPeriodicRemoveOwn, rowKindPeriodicNameTaken,
		rowKindPeriodicBadInput, rowKindPeriodicAfterStop, rowKindPeriodicOncePerTick}
}

// kindTicks returns the jobs in queue of the periodic job named name,
// oldest tick first.
func kindTicks(t T, c Client, queue, name string) []leaserouter.Job[string] {
	t.Helper()
	res, err := c.Queue(queue).List(ctxOf(t), leaserouter.ListParams{IDPrefix: name + "@", Limit: leaserouter.MaxListLimit})
	require.NoError(t, err)
	slices.Reverse(res.Jobs) // newest first
	return res.Jobs
}

// rowKindPeriodicTicks: a Kind's periodic job, added before Start, gets
// one job per tick, of that Kind, with ID TickID(name, tick) and payload
// Payload(tick), none before AddPeriodic; the jobs wait for Start, then
// the Kind's handler runs each with its payload. A WithQueue among its
// Options puts the ticks' jobs on that queue; a nil Payload gives the
// zero payload.
var rowKindPeriodicTicks = ClientRow{Name: "periodic/a Kind's periodic job: one job per tick of that kind, the tick's payload, run by its handler", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q1": {}, "q2": {}}})
	ctx := ctxOf(t)
	var ran recorder
	hd := func(_ context.Context, l Lease) error { ran.add(l.JobID() + "=" + l.Payload()); return nil }
	k := register(t, c, "k", hd, leaserouter.WithKindQueue("q1"))
	other := register(t, c, "other", hd, leaserouter.WithKindQueue("q1"))
	every := h.Lease() / 2
	start := time.Now()
	require.NoError(t, k.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "tick", Schedule: leaserouter.Every(every),
		Payload: func(tick time.Time) string { return tick.UTC().Format(time.RFC3339Nano) },
		Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(3)}}), "AddPeriodic before Start")
	require.NoError(t, other.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "elsewhere", Schedule: leaserouter.Every(every),
		Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("q2")}}))
	eventually(t, h, "two ticks of each, waiting for Start", func() bool {
		return len(kindTicks(t, c, "q1", "tick")) >= 2 && len(kindTicks(t, c, "q2", "elsewhere")) >= 2
	})
	require.Empty(t, ran.list(), "no handler runs before Start")
	for _, j := range kindTicks(t, c, "q1", "tick") {
		require.NotEqual(t, leaserouter.StateSucceeded, j.State, "%s waits for Start", j.ID)
	}
	require.NoError(t, c.Start(ctx))
	tickRuns := func() (runs []string) {
		for _, r := range ran.list() {
			if len(r) > 5 && r[:5] == "tick@" {
				runs = append(runs, r)
			}
		}
		return runs
	}
	eventually(t, h, "three ticks run", func() bool { return len(tickRuns()) >= 3 })
	jobs := kindTicks(t, c, "q1", "tick")
	byID := map[string]leaserouter.Job[string]{}
	for i, j := range jobs {
		byID[j.ID] = j
		tick, err := time.Parse(time.RFC3339Nano, j.Payload)
		require.NoError(t, err, "the payload is Payload(tick)")
		require.Equal(t, leaserouter.TickID("tick", tick), j.ID)
		require.Equal(t, "k", j.Kind, "a job of the Kind that added it")
		require.Equal(t, 3, j.Priority, "its Options apply")
		if i == 0 {
			require.False(t, tick.Before(start), "the first tick %v is at or after AddPeriodic (%v)", tick, start)
			continue
		}
		prev, err := time.Parse(time.RFC3339Nano, jobs[i-1].Payload)
		require.NoError(t, err)
		// A tick a late wake-up skipped is the periodic rows' rule (only the
		// latest due tick is enqueued), not this row's: ticks are whole
		// intervals apart, none repeated.
		d := tick.Sub(prev)
		require.True(t, d > 0 && d%every == 0, "ticks %v and %v: one job per tick, a whole number of intervals apart", prev, tick)
	}
	runs := tickRuns()
	for _, r := range runs {
		id, payload, _ := strings.Cut(r, "=")
		j, ok := byID[id]
		require.True(t, ok, "the handler ran %s, a job of the periodic job", id)
		require.Equal(t, j.Payload, payload, "the Kind's handler got the tick's payload")
	}
	require.Len(t, runs, len(slices.Compact(slices.Sorted(slices.Values(runs)))), "each tick's job ran once")
	for _, j := range kindTicks(t, c, "q2", "elsewhere") {
		require.Equal(t, "other", j.Kind)
		require.Empty(t, j.Payload, "a nil Payload gives the zero payload")
	}
	require.Empty(t, kindTicks(t, c, "q1", "elsewhere"), "WithQueue's ticks are in that queue only")
}}

// rowKindPeriodicRemoveOwn: a Kind's RemovePeriodic stops its own
// periodic job only: another Kind's of another name (even one it
// prefixes) goes on, another Kind cannot remove it (ErrNotFound), a
// second RemovePeriodic is ErrNotFound, and the name may be added again,
// by any Kind of the queue.
var rowKindPeriodicRemoveOwn = ClientRow{Name: "periodic/a Kind's RemovePeriodic stops its own ticks only; another Kind's name is not its own", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{})
	ctx := ctxOf(t)
	a, b := register(t, c, "a", noop), register(t, c, "b", noop)
	q := leaserouter.DefaultQueue
	every := h.Lease() / 2
	var ticked sync.Map // name: a tick's Payload was called
	add := func(k Kind, name string) error {
		return k.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: name, Schedule: leaserouter.Every(every),
			Payload: func(time.Time) string { ticked.Store(name, true); return "" }})
	}
	require.NoError(t, add(a, "a"))
	require.NoError(t, add(b, "ab"))
	require.NoError(t, c.Start(ctx))
	eventually(t, h, "a tick of each", func() bool {
		_, x := ticked.Load("a")
		_, y := ticked.Load("ab")
		return x && y
	})
	require.ErrorIs(t, b.RemovePeriodic("a"), leaserouter.ErrNotFound, "another Kind's periodic job is not b's to remove")
	require.ErrorIs(t, a.RemovePeriodic("ab"), leaserouter.ErrNotFound)
	require.NoError(t, a.RemovePeriodic("a"))
	removed := time.Now()
	require.ErrorIs(t, a.RemovePeriodic("a"), leaserouter.ErrNotFound, "removed already")
	// From the tick after the next one (the next may be in progress as
	// RemovePeriodic returns): b's ticks go on, a's have stopped. Any
	// tick from then on, not given ones: a late wake-up of the scheduler
	// enqueues only the latest due tick.
	from := time.Unix(0, (removed.UnixNano()/int64(every)+2)*int64(every))
	since := func(name string, from time.Time) (ticks []leaserouter.Job[string]) {
		for _, j := range kindTicks(t, c, q, name) {
			_, at, _ := strings.Cut(j.ID, "@")
			tick, err := time.Parse(time.RFC3339Nano, at)
			require.NoError(t, err, "a tick's job ID is TickID")
			if !tick.Before(from) {
				ticks = append(ticks, j)
			}
		}
		return ticks
	}
	eventually(t, h, "two of b's ticks from then on", func() bool { return len(since("ab", from)) >= 2 })
	require.Empty(t, since("a", from), "no job for a tick of the removed periodic job since %v (removed at %v)", from, removed)
	require.NoError(t, add(b, "a"), "a removed name may be added again, by another Kind of the queue")
	var again []leaserouter.Job[string]
	eventually(t, h, "a tick of the name added again", func() bool {
		again = since("a", from)
		return len(again) > 0
	})
	for _, j := range again {
		require.Equal(t, "b", j.Kind, "the ticks are the adding Kind's")
	}
}}

// rowKindPeriodicNameTaken: names are per queue: a name already added on
// the queue, by the same Kind or another, is refused with
// ErrInvalidOptions (naming the queue); on another queue (WithQueue) it
// is free. A WithQueue naming a queue the Client lacks: ErrInvalidOptions.
var rowKindPeriodicNameTaken = ClientRow{Name: "periodic/a name already added on the queue, by any Kind, is refused with ErrInvalidOptions", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q1": {}, "q2": {}}})
	ctx := ctxOf(t)
	a := register(t, c, "a", noop, leaserouter.WithKindQueue("q1"))
	b := register(t, c, "b", noop, leaserouter.WithKindQueue("q1"))
	hourly := leaserouter.Every(time.Hour)
	p := leaserouter.Periodic[string]{Name: "p", Schedule: hourly}
	require.NoError(t, a.AddPeriodic(ctx, p))
	for _, k := range []Kind{a, b} {
		err := k.AddPeriodic(ctx, p)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "kind %s", k.Name())
		require.EqualError(t, err, `leaserouter: invalid options: Periodic "p" is already added on queue "q1"`)
	}
	elsewhere := leaserouter.Periodic[string]{Name: "p", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("q2")}}
	require.NoError(t, b.AddPeriodic(ctx, elsewhere), "names are per queue")
	nowhere := leaserouter.Periodic[string]{Name: "n", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("q3")}}
	err := a.AddPeriodic(ctx, nowhere)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.ErrorContains(t, err, `"q3"`)
	require.ErrorIs(t, a.RemovePeriodic("n"), leaserouter.ErrNotFound, "nothing added")
	require.NoError(t, a.RemovePeriodic("p"))
	require.NoError(t, b.RemovePeriodic("p"), "b's own, on q2")
	require.ErrorIs(t, b.RemovePeriodic("p"), leaserouter.ErrNotFound)
}}

// rowKindPeriodicBadInput: a Kind's AddPeriodic refuses what a Router's
// does, with ErrInvalidOptions and the same message: an empty name, a
// nil schedule, Every(0), WithRunAt among the options, a negative
// Retention of the queue.
var rowKindPeriodicBadInput = ClientRow{Name: "periodic/a Kind's AddPeriodic refuses bad input as a Router's does: ErrInvalidOptions, the same message", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{Queues: map[string]QueueConfig{"q": {}, "nr": {Config: Config{Retention: -1}}}})
	ctx := ctxOf(t)
	k := register(t, c, "k", noop, leaserouter.WithKindQueue("q"))
	hourly := leaserouter.Every(time.Hour)
	for name, p := range map[string]leaserouter.Periodic[string]{
		"empty name":    {Schedule: hourly},
		"nil schedule":  {Name: "p"},
		"Every(0)":      {Name: "p", Schedule: leaserouter.Every(0)},
		"WithRunAt":     {Name: "p", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithRunAt(time.Now())}},
		"Retention < 0": {Name: "p", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("nr")}},
	} {
		err := k.AddPeriodic(ctx, p)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, name)
		retention := time.Duration(0)
		if name == "Retention < 0" {
			retention = -1
		}
		require.EqualError(t, err, checkPeriodic(p, retention).Error(), "%s: the message of a Router's AddPeriodic", name)
	}
	for _, q := range []string{"q", "nr"} {
		require.Empty(t, kindTicks(t, c, q, "p"), "nothing added")
	}
	require.ErrorIs(t, k.RemovePeriodic("p"), leaserouter.ErrNotFound, "nothing added")
}}

// rowKindPeriodicAfterStop: Stop stops the Kinds' periodic jobs and waits
// for their scheduler: no Payload call after Stop returns; after Stop,
// AddPeriodic and RemovePeriodic return ErrClosed.
var rowKindPeriodicAfterStop = ClientRow{Name: "periodic/Stop ends a Kind's periodic jobs: no tick after it; AddPeriodic and RemovePeriodic ErrClosed", Test: func(t T, h ClientHarness) {
	c := newClient(t, h, ClientConfig{})
	ctx := ctxOf(t)
	k := register(t, c, "k", noop)
	every := h.Lease() / 2
	var calls atomic.Int32
	require.NoError(t, k.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(every),
		Payload: func(time.Time) string { calls.Add(1); return "" }}))
	require.NoError(t, c.Start(ctx))
	eventually(t, h, "a tick", func() bool { return calls.Load() > 0 })
	require.NoError(t, c.Stop(ctx))
	n := calls.Load()
	h.Advance(3 * every)
	require.Equal(t, n, calls.Load(), "no Payload call after Stop")
	require.ErrorIs(t, k.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "q", Schedule: leaserouter.Every(every)}), leaserouter.ErrClosed)
	require.ErrorIs(t, k.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(every)}), leaserouter.ErrClosed)
	require.ErrorIs(t, k.RemovePeriodic("p"), leaserouter.ErrClosed)
	require.ErrorIs(t, k.RemovePeriodic("unknown"), leaserouter.ErrClosed)
}}

// rowKindPeriodicOncePerTick: two processes whose Clients add the same
// Kind's periodic job on a queue get one job per tick between them, run
// once: the job set takes each tick once, so neither process even tries
// to enqueue a tick the other took (no duplicate counted by either).
var rowKindPeriodicOncePerTick = ClientRow{Name: "periodic/two processes adding a Kind's periodic job: each tick taken once, its job run once", Needs: "SharedClients", Test: func(t T, h ClientHarness) {
	ctx := ctxOf(t)
	var ran recorder
	hd := func(_ context.Context, l Lease) error { ran.add(l.JobID()); return nil }
	every := h.Lease() / 2
	p := leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(every)}
	one := newClient(t, h, ClientConfig{})
	two, err := h.Peer(t, one, ClientConfig{})
	require.NoError(t, err)
	for _, c := range []Client{one, two} {
		require.NoError(t, register(t, c, "k", hd).AddPeriodic(ctx, p))
		require.NoError(t, c.Start(ctx))
	}
	eventually(t, h, "four ticks run", func() bool { return len(ran.list()) >= 4 })
	jobs := kindTicks(t, one, leaserouter.DefaultQueue, "p")
	runs := ran.list()
	require.Len(t, runs, len(slices.Compact(slices.Sorted(slices.Values(runs)))), "each tick's job ran once: %q", runs)
	var enqueued, duplicates uint64
	for _, c := range []Client{one, two} {
		qs, err := c.QueueStats(ctx)
		require.NoError(t, err)
		enqueued, duplicates = enqueued+qs[0].Stats.Enqueued, duplicates+qs[0].Stats.Duplicates
	}
	require.Zero(t, duplicates, "a tick taken by one process is not tried by the other")
	require.GreaterOrEqual(t, enqueued, uint64(len(runs)), "every job run was enqueued by one of them")
	for _, j := range jobs {
		require.Equal(t, "k", j.Kind)
	}
}}
