package routertest

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Periodic jobs (AddPeriodic, RemovePeriodic), a row per rule, on every
// backend. Their multi-scheduler promise (one job per tick however many
// processes schedule it) is each backend's own test: the core's job set
// is one process's.

// Periodics is the periodic jobs of a Backend. Every backend implements
// it (the suite's own fake does not: its rows are not run there).
type Periodics interface {
	AddPeriodic(ctx context.Context, p leaserouter.Periodic[string]) error
	RemovePeriodic(name string) error
}

func periodicRows() []Row {
	return []Row{rowPeriodicTicks, rowPeriodicBadInput, rowPeriodicDenseScheduleTakesTurns}
}

// checkPeriodic is the error every backend's AddPeriodic returns for p
// on a router whose Retention is retention: the contract's.
func checkPeriodic(p leaserouter.Periodic[string], retention time.Duration) error {
	return contract.CheckPeriodic(leaserouter.ErrInvalidOptions, leaserouter.ErrInvalidJob, p.Name, p.Schedule, p.Options, retention)
}

// periodics returns b's Periodics, failing t if it has none.
func periodics(t T, b Backend) Periodics {
	t.Helper()
	p, ok := b.(Periodics)
	if !ok {
		t.Errorf("the backend %T has no periodic jobs (AddPeriodic, RemovePeriodic)", b)
		t.FailNow()
	}
	return p
}

// tickJobs returns the jobs of the periodic job named name, oldest tick
// first.
func tickJobs(t T, b Backend, name string) []leaserouter.Job[string] {
	t.Helper()
	res, err := admin(t, b).List(ctxOf(t), leaserouter.ListParams{IDPrefix: name + "@", Limit: leaserouter.MaxListLimit})
	require.NoError(t, err)
	slices.Reverse(res.Jobs) // newest first
	return res.Jobs
}

// rowPeriodicTicks: a periodic job gets one job per tick, with the ID
// TickID(name, tick), run-at the tick and payload Payload(tick), the
// first at or after AddPeriodic (none for the tick before it), ticks a
// whole interval apart on multiples of it since the Unix epoch; its
// Options apply; two periodic jobs run side by side; after RemovePeriodic
// no later tick gets a job, and the name may be added again.
var rowPeriodicTicks = Row{Name: "periodic/one job per tick, ID TickID, run-at the tick; RemovePeriodic stops it", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	ps := periodics(t, b)
	every := h.Lease() / 2
	start := time.Now()
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{
		Name: "tick", Schedule: leaserouter.Every(every),
		Payload: func(tick time.Time) string { return tick.UTC().Format(time.RFC3339Nano) },
		Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(7), leaserouter.WithMaxAttempts(3)},
	}))
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "other", Schedule: leaserouter.Every(every)}))
	eventually(t, h, "three ticks of each", func() bool {
		return len(tickJobs(t, b, "tick")) >= 3 && len(tickJobs(t, b, "other")) >= 3
	})
	require.NoError(t, ps.RemovePeriodic("tick"))
	removed := time.Now()
	jobs := tickJobs(t, b, "tick")
	for i, j := range jobs {
		tick, err := time.Parse(time.RFC3339Nano, j.Payload)
		require.NoError(t, err, "the payload is Payload(tick)")
		require.Equal(t, leaserouter.TickID("tick", tick), j.ID)
		require.True(t, tick.Equal(j.RunAt) || j.RunAt.IsZero(), "run-at %v is the tick %v (zero once ready)", j.RunAt, tick)
		require.Zero(t, tick.UnixNano()%int64(every), "tick %v is a multiple of %v since the epoch", tick, every)
		require.Equal(t, 7, j.Priority, "the periodic job's Options apply")
		require.Equal(t, 3, j.MaxAttempts)
		if i == 0 {
			require.False(t, tick.Before(start), "the first tick %v is at or after AddPeriodic (%v): the one before is not enqueued", tick, start)
			continue
		}
		prev, err := time.Parse(time.RFC3339Nano, jobs[i-1].Payload)
		require.NoError(t, err)
		require.Equal(t, every, tick.Sub(prev), "one job per tick, none skipped or repeated")
	}
	h.Advance(3 * every)
	for _, j := range tickJobs(t, b, "tick") {
		tick, err := time.Parse(time.RFC3339Nano, j.Payload)
		require.NoError(t, err)
		require.False(t, tick.After(removed), "no job for the tick %v after RemovePeriodic (%v)", tick, removed)
	}
	require.Greater(t, len(tickJobs(t, b, "other")), 3, "the other periodic job goes on")
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "tick", Schedule: leaserouter.Every(every)}),
		"a removed name may be added again")
}}

// rowPeriodicBadInput: AddPeriodic refuses, with ErrInvalidOptions, an
// empty name, a nil schedule, Every(d <= 0), WithRunAt or WithDelay among
// the options, a name already added, and a negative Retention;
// RemovePeriodic of an unknown name is ErrNotFound; after Close both are
// ErrClosed. Each refusal of bad input has one message on every backend
// (contract.CheckPeriodic's).
var rowPeriodicBadInput = Row{Name: "periodic/bad input refused with ErrInvalidOptions, unknown name ErrNotFound, after Close ErrClosed", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	ps := periodics(t, b)
	hourly := leaserouter.Every(time.Hour)
	for name, p := range map[string]leaserouter.Periodic[string]{
		"empty name":    {Schedule: hourly},
		"nil schedule":  {Name: "p"},
		"Every(0)":      {Name: "p", Schedule: leaserouter.Every(0)},
		"Every(-1s)":    {Name: "p", Schedule: leaserouter.Every(-time.Second)},
		"WithRunAt":     {Name: "p", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithRunAt(time.Now())}},
		"WithDelay":     {Name: "p", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithDelay(time.Second)}},
		"bad option":    {Name: "p", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithMaxAttempts(0)}},
		"NUL in name":   {Name: "p\x00", Schedule: hourly},
		"name too long": {Name: string(make([]byte, leaserouter.MaxIDBytes)), Schedule: hourly},
	} {
		err := ps.AddPeriodic(ctx, p)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, name)
		require.EqualError(t, err, checkPeriodic(p, 0).Error(), "%s: one message on every backend", name)
	}
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "p", Schedule: hourly}))
	require.ErrorIs(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "p", Schedule: hourly}), leaserouter.ErrInvalidOptions, "a name already added")
	require.ErrorIs(t, ps.RemovePeriodic("unknown"), leaserouter.ErrNotFound)
	require.ErrorIs(t, ps.RemovePeriodic(""), leaserouter.ErrNotFound)

	nr := periodics(t, open(t, h, Config{Retention: -1}))
	kept := leaserouter.Periodic[string]{Name: "p", Schedule: hourly}
	err := nr.AddPeriodic(ctx, kept)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "Retention < 0: no dedup record for a tick")
	require.EqualError(t, err, checkPeriodic(kept, -1).Error(), "Retention < 0: one message on every backend")

	require.NoError(t, b.Close(ctx))
	require.ErrorIs(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "q", Schedule: hourly}), leaserouter.ErrClosed)
	require.ErrorIs(t, ps.RemovePeriodic("p"), leaserouter.ErrClosed)
}}

// rowPeriodicDenseScheduleTakesTurns: a legal Schedule whose ticks come
// faster than its Next can step through them (10ns apart, each 1,024
// calls costing 1/256 of the other job's interval on the backend's clock)
// does not delay another periodic job's ticks: an Every beside it gets
// (nearly) every tick of the window, not one or none.
var rowPeriodicDenseScheduleTakesTurns = Row{Name: "periodic/a schedule too dense to keep up with takes turns: another periodic job gets its ticks", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	ps := periodics(t, b)
	every := h.Lease() / 2
	dense := &costlySchedule{h: h, cost: every / 256}
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "dense", Schedule: dense}))
	start := time.Now()
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "other", Schedule: leaserouter.Every(every)}))
	h.Advance(6*every + every/2)
	end := time.Now()
	dense.stop.Store(true) // its schedule ends at the next call of Next
	h.Advance(2 * dense.cost)
	n := 0
	for _, j := range tickJobs(t, b, "other") {
		if !j.RunAt.After(end) {
			n++
		}
	}
	due := int(end.UnixNano()/int64(every) - (start.UnixNano()-1)/int64(every)) // the multiples of every in [start, end]
	t.Logf("%s: %d of the %d ticks of the other job enqueued", h.Name(), n, due)
	require.GreaterOrEqual(t, n, due/2, "the dense schedule held the other periodic job's ticks back")
}}

// costlySchedule ticks every 10ns, and every 1,024 calls of Next lets cost
// pass on the backend's clock: a schedule that costs more time than the
// ticks it steps through cover (in a bubble, its cost must be on the
// backend's clock to be seen at all). Once stopped, it has no more ticks.
type costlySchedule struct {
	h     Harness
	cost  time.Duration
	calls atomic.Int64
	stop  atomic.Bool
}

func (s *costlySchedule) Next(t time.Time) time.Time {
	if s.stop.Load() {
		return time.Time{}
	}
	if s.calls.Add(1)%1024 == 0 {
		s.h.Advance(s.cost)
	}
	return t.Add(10 * time.Nanosecond)
}
