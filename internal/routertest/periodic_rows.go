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
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Periodic jobs (AddPeriodic, RemovePeriodic), a row per rule, on every
// backend. Their multi-scheduler promise (one job per tick however many
// processes schedule it) is each backend's own test: the core's job set
// is one process's.

// Periodics is the periodic jobs of a Backend. Every backend implements
// it (the suite's own fake too, for the proofs of the periodic rows).
type Periodics interface {
	AddPeriodic(ctx context.Context, p leaserouter.Periodic[string]) error
	RemovePeriodic(name string) error
}

func periodicRows() []Row {
	return []Row{rowPeriodicTicks, rowPeriodicRemoveStopsOnlyItsOwn, rowPeriodicPayloadPanicSkipsTick, rowPeriodicCloseWaits,
		rowPeriodicBadInput, rowPeriodicDenseScheduleTakesTurns}
}

// checkPeriodic is the error every backend's AddPeriodic returns for p
// on a router whose Retention is retention: the contract's.
func checkPeriodic(p leaserouter.Periodic[string], retention time.Duration) error {
	return contract.CheckPeriodic(leaserouter.ErrInvalidOptions, leaserouter.ErrInvalidJob, p.Name, p.Schedule, p.Options, retention)
}

// periodics returns b's Periodics, failing t if it has none.
func periodics(t T, b Backend) Periodics {
	t.Helper()
	return offers[Periodics](t, b, "periodic jobs (AddPeriodic, RemovePeriodic)")
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
// Options apply; two periodic jobs run side by side.
var rowPeriodicTicks = Row{Name: "periodic/one job per tick, ID TickID, run-at the tick", Test: func(t T, h Harness) {
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
	for _, j := range tickJobs(t, b, "other") {
		require.Empty(t, j.Payload, "a nil Payload gives the zero payload")
	}
}}

// rowPeriodicRemoveStopsOnlyItsOwn: after RemovePeriodic no tick of that
// periodic job later than the one in progress gets a job, while another
// periodic job, even one whose name it prefixes, goes on; the removed
// name is unknown to a second RemovePeriodic and may be added again.
var rowPeriodicRemoveStopsOnlyItsOwn = Row{Name: "periodic/RemovePeriodic stops only its own ticks", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	ps := periodics(t, b)
	every := h.Lease() / 2
	var ticked sync.Map // name: a tick's Payload was called
	for _, name := range []string{"a", "ab"} {
		require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: name, Schedule: leaserouter.Every(every),
			Payload: func(time.Time) string { ticked.Store(name, true); return "" }}))
	}
	eventually(t, h, "a tick of each", func() bool {
		_, a := ticked.Load("a")
		_, ab := ticked.Load("ab")
		return a && ab
	})
	require.NoError(t, ps.RemovePeriodic("a"))
	removed := time.Now()
	require.ErrorIs(t, ps.RemovePeriodic("a"), leaserouter.ErrNotFound, "a removed name is unknown")
	// The ticks after the next one: the next may be in progress as
	// RemovePeriodic returns (on a clock of its own, a little ahead).
	later := []time.Time{
		time.Unix(0, (removed.UnixNano()/int64(every)+2)*int64(every)),
		time.Unix(0, (removed.UnixNano()/int64(every)+3)*int64(every)),
	}
	eventually(t, h, "the other periodic job's later ticks", func() bool {
		for _, tick := range later {
			if _, ok, err := b.Get(ctx, leaserouter.TickID("ab", tick)); err != nil || !ok {
				return false
			}
		}
		return true
	})
	for _, tick := range later {
		_, ok, err := b.Get(ctx, leaserouter.TickID("a", tick))
		require.NoError(t, err)
		require.False(t, ok, "no job for the tick %v of the removed periodic job (removed at %v)", tick, removed)
	}
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "a", Schedule: leaserouter.Every(every)}),
		"a removed name may be added again")
	readded := time.Now()
	again := time.Unix(0, (readded.UnixNano()/int64(every)+2)*int64(every))
	eventually(t, h, "a tick of the name added again", func() bool {
		_, ok, err := b.Get(ctx, leaserouter.TickID("a", again))
		return err == nil && ok
	})
}}

// rowPeriodicPayloadPanicSkipsTick: a Payload that panics is recovered,
// counted (Stats.CallbackPanics) and reported through the Logger at level
// Error, naming the periodic job and the panic, and skips that tick only:
// it gets no job, and the later ticks get theirs with their payloads.
var rowPeriodicPayloadPanicSkipsTick = Row{Name: "periodic/a panicking Payload skips that tick only, counted in CallbackPanics", Test: func(t T, h Harness) {
	logs := &LogRecorder{}
	b := open(t, h, Config{Logger: slog.New(logs)})
	every := h.Lease() / 2
	ctx := ctxOf(t)
	ps := periodics(t, b)
	var (
		mu    sync.Mutex
		ticks []time.Time // every tick Payload was called for; the first panicked
	)
	payload := func(tick time.Time) string { return "for " + tick.UTC().Format(time.RFC3339Nano) }
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(every),
		Payload: func(tick time.Time) string {
			if err := ps.RemovePeriodic("unknown"); !errors.Is(err, leaserouter.ErrNotFound) {
				panic(fmt.Sprint("Payload runs outside the backend's lock: RemovePeriodic from it: ", err))
			}
			mu.Lock()
			ticks = append(ticks, tick)
			first := len(ticks) == 1
			mu.Unlock()
			if first {
				panic("no payload for this tick")
			}
			return payload(tick)
		}}))
	called := func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ticks)
	}
	eventually(t, h, "two ticks after the panicking one enqueued", func() bool {
		seen, n := called(), 0
		if len(seen) < 2 {
			return false
		}
		for _, tick := range seen[1:] {
			if _, ok, err := b.Get(ctx, leaserouter.TickID("p", tick)); err == nil && ok {
				n++
			}
		}
		return n >= 2
	})
	seen := called()
	_, ok, err := b.Get(ctx, leaserouter.TickID("p", seen[0]))
	require.NoError(t, err)
	require.False(t, ok, "the tick %v whose Payload panicked has no job", seen[0])
	for i, tick := range seen[1:] {
		if j, ok, err := b.Get(ctx, leaserouter.TickID("p", tick)); err == nil && ok {
			require.Equal(t, payload(tick), j.Payload, "a later tick's job has its payload")
		}
		if h.Caps().ExactClock {
			require.Equal(t, every, tick.Sub(seen[i]), "no other tick skipped")
		}
	}
	require.EqualValues(t, 1, stats(t, b).CallbackPanics, "the panic counted")
	require.NoError(t, b.Close(ctx)) // every report delivered
	reports := logs.Errors()         // each with its job_id
	require.Len(t, reports, 1, "one report: %q", reports)
	require.Contains(t, reports[0], `periodic job "p"`)
	require.Contains(t, reports[0], "panicked: no payload for this tick")
	require.Contains(t, reports[0], "tick skipped")
	require.True(t, strings.HasSuffix(reports[0], " job_id="+leaserouter.TickID("p", seen[0])),
		"the report names the skipped tick's job: %q", reports[0])
}}

// rowPeriodicCloseWaits: Close stops the periodic scheduler and waits for
// it: with a ctx not done, a Payload call in progress has returned when
// Close returns, its tick gets no job, and no Payload call is made after.
var rowPeriodicCloseWaits = Row{Name: "periodic/Close waits for the scheduler: a Payload in progress has returned, none called after", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	ps := periodics(t, b)
	every := h.Lease() / 2
	var (
		calls    atomic.Int32
		returned atomic.Bool
		first    time.Time // the tick of the Payload call Close waits for
	)
	entered, release := make(chan struct{}), make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the backend's Close, should the row fail
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "slow", Schedule: leaserouter.Every(every),
		Payload: func(tick time.Time) string {
			if calls.Add(1) == 1 {
				first = tick
				close(entered)
				<-release
				returned.Store(true)
			}
			return ""
		}}))
	eventually(t, h, "a Payload call", func() bool { return isClosed(entered) })
	closed := make(chan error, 1)
	go func() { closed <- b.Close(ctx) }()
	// Close has begun once calls are refused with ErrClosed (a probe
	// enqueued before that is a job like any other): only then may
	// Payload return, or a late Close would rightly let its tick through.
	eventually(t, h, "Close began", func() bool {
		return errors.Is(b.Enqueue(ctx, "probe", ""), leaserouter.ErrClosed)
	})
	h.Advance(every)
	select {
	case err := <-closed:
		t.Errorf("Close returned (%v) while Payload ran", err)
		t.FailNow()
	default:
	}
	free()
	var err error
	eventually(t, h, "Close returned once Payload did", func() bool {
		select {
		case err = <-closed:
			return true
		default:
			return false
		}
	})
	require.NoError(t, err)
	require.True(t, returned.Load(), "Payload had returned when Close returned")
	_, ok, err := b.Get(ctx, leaserouter.TickID("slow", first))
	require.NoError(t, err)
	require.False(t, ok, "the tick whose Payload ran when Close began gets no job")
	n := calls.Load()
	h.Advance(3 * every)
	require.Equal(t, n, calls.Load(), "no Payload call after Close")
}}

// isClosed reports whether c is closed, without waiting.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// rowPeriodicBadInput: AddPeriodic refuses, with ErrInvalidOptions and
// one message on every backend, an empty name, a nil schedule, Every(d <=
// 0), WithRunAt or WithDelay among the options, a bad option, a name that
// breaks the rule for IDs or leaves no room for the tick; and, with
// ErrInvalidOptions, a name already added and a negative Retention.
// RemovePeriodic of an unknown name (or one removed already) is
// ErrNotFound; a removed name may be added again; after Close both are
// ErrClosed.
var rowPeriodicBadInput = Row{Name: "periodic/bad input refused with ErrInvalidOptions, unknown name ErrNotFound, after Close ErrClosed", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	ps := periodics(t, b)
	hourly := leaserouter.Every(time.Hour)
	long := strings.Repeat("n", leaserouter.MaxIDBytes-30)
	for name, c := range map[string]struct {
		p    leaserouter.Periodic[string]
		want string
	}{
		"empty name":   {leaserouter.Periodic[string]{Schedule: hourly}, "Periodic.Name is empty"},
		"nil schedule": {leaserouter.Periodic[string]{Name: "p"}, `Periodic "p" has a nil Schedule`},
		"Every(0)": {leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(0)},
			`Periodic "p" has Schedule Every(0s), the interval must be > 0`},
		"Every(-1s)": {leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(-time.Second)},
			`Periodic "p" has Schedule Every(-1s), the interval must be > 0`},
		"WithRunAt": {leaserouter.Periodic[string]{Name: "p", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithRunAt(time.Now())}},
			`Periodic "p" has WithRunAt or WithDelay among its Options: the tick is the run-at`},
		"WithDelay": {leaserouter.Periodic[string]{Name: "p", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithDelay(time.Second)}},
			`Periodic "p" has WithRunAt or WithDelay among its Options: the tick is the run-at`},
		"bad option": {leaserouter.Periodic[string]{Name: "p", Schedule: hourly, Options: []leaserouter.EnqueueOption{leaserouter.WithMaxAttempts(0)}},
			`Periodic "p": leaserouter: invalid job: WithMaxAttempts(0) for job "p@1970-01-01T00:00:00Z", must be in [1, 2147483647]`},
		"NUL in name":    {leaserouter.Periodic[string]{Name: "p\x00", Schedule: hourly}, `Periodic.Name "p\x00" holds NUL at byte 1`},
		"name not UTF-8": {leaserouter.Periodic[string]{Name: "bad\xff", Schedule: hourly}, `Periodic.Name "bad\xff" is not valid UTF-8 at byte 3`},
		"name too long":  {leaserouter.Periodic[string]{Name: string(make([]byte, leaserouter.MaxIDBytes)), Schedule: hourly}, ""},
		"no tick's room": {leaserouter.Periodic[string]{Name: long, Schedule: hourly},
			`Periodic.Name "` + long[:32] + `"... is 994 bytes, above MaxIDBytes less the tick's room (984)`},
	} {
		err := ps.AddPeriodic(ctx, c.p)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, name)
		if c.want != "" {
			require.EqualError(t, err, "leaserouter: invalid options: "+c.want, "%s: one message on every backend", name)
		}
	}
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "p", Schedule: hourly}))
	require.ErrorIs(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "p", Schedule: hourly}), leaserouter.ErrInvalidOptions, "a name already added")
	require.ErrorIs(t, ps.RemovePeriodic("unknown"), leaserouter.ErrNotFound)
	require.ErrorIs(t, ps.RemovePeriodic(""), leaserouter.ErrNotFound)
	require.NoError(t, ps.RemovePeriodic("p"))
	require.ErrorIs(t, ps.RemovePeriodic("p"), leaserouter.ErrNotFound, "removed already")
	require.NoError(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "p", Schedule: hourly}), "added again once removed")

	nr := periodics(t, open(t, h, Config{Retention: -1}))
	kept := leaserouter.Periodic[string]{Name: "p", Schedule: hourly}
	err := nr.AddPeriodic(ctx, kept)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "Retention < 0: no dedup record for a tick")
	require.EqualError(t, err, checkPeriodic(kept, -1).Error(), "Retention < 0: one message on every backend")

	require.NoError(t, b.Close(ctx))
	require.ErrorIs(t, ps.AddPeriodic(ctx, leaserouter.Periodic[string]{Name: "q", Schedule: hourly}), leaserouter.ErrClosed)
	require.ErrorIs(t, ps.RemovePeriodic("p"), leaserouter.ErrClosed)
	require.ErrorIs(t, ps.RemovePeriodic("unknown"), leaserouter.ErrClosed)
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
