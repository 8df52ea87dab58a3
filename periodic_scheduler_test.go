package leaserouter_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	_ "time/tzdata" // America/New_York wherever the tests run

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/routertest"
)

// The tests of the scheduler goroutine (periodic_scheduler.go): one job
// per tick through stalls and restarts, schedules that end, refused
// enqueues, user code outside the lock, and its end at Close.

// calendar is a test-only cron-like Schedule: the minutes of the hours
// given, in wall-clock time of loc. A wall time the DST change skips is
// no tick; a repeated one ticks once.
type calendar struct {
	loc            *time.Location
	hours, minutes []int // ascending
}

func (c calendar) Next(t time.Time) time.Time {
	y, m, d := t.In(c.loc).Date()
	for day := range 3 {
		for _, h := range c.hours {
			for _, mi := range c.minutes {
				at := time.Date(y, m, d+day, h, mi, 0, 0, c.loc)
				if at.Hour() == h && at.Minute() == mi && at.After(t) {
					return at
				}
			}
		}
	}
	return time.Time{}
}

// newYork is "at minute 0 and 30 of 1 and 2 a.m. in America/New_York":
// the hours DST changes skip or repeat.
func newYork(t *testing.T) calendar {
	loc, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	return calendar{loc: loc, hours: []int{1, 2}, minutes: []int{0, 30}}
}

// tickPayload is the payload the tests' Payload gives a tick.
func tickPayload(tick time.Time) string { return tick.UTC().Format(time.RFC3339Nano) }

// pauser is a Payload that blocks on the tick at, until release: the
// scheduler is stalled there, as a paused process is, while the fake clock
// moves on.
type pauser struct {
	mu      sync.Mutex
	at      time.Time
	release chan struct{}
}

func (p *pauser) payload(tick time.Time) string {
	p.mu.Lock()
	at, release := p.at, p.release
	p.mu.Unlock()
	if tick.Equal(at) {
		<-release
	}
	return tickPayload(tick)
}

func (p *pauser) set(at time.Time) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at, p.release = at, make(chan struct{})
	return p.release
}

// wantTick is a job a tick should get: enqueued at the instant at (the
// tick itself unless the scheduler was stalled).
type wantTick struct{ tick, at time.Time }

// tickDriver runs a periodic job through Routers, stretches of time,
// pauses and gaps with no Router, and keeps the jobs each Router should
// hold.
type tickDriver struct {
	t       *testing.T
	name    string
	s       leaserouter.Schedule
	ret     time.Duration
	r       *router
	rec     *recorder
	p       pauser
	want    []wantTick
	handled time.Time // the ticks up to it are accounted for
	start   time.Time
	routers int
}

func newTickDriver(t *testing.T, name string, s leaserouter.Schedule, ret time.Duration) *tickDriver {
	return &tickDriver{t: t, name: name, s: s, ret: ret, start: time.Now()}
}

// open starts a Router and adds the periodic job at the current instant.
func (d *tickDriver) open() {
	d.rec = &recorder{}
	d.r = setup(d.t, leaserouter.Options{Retention: d.ret, OnEvent: d.rec.record})
	d.routers++
	require.NoError(d.t, d.r.AddPeriodic(leaserouter.Periodic[string]{Name: d.name, Schedule: d.s, Payload: d.p.payload}))
	d.handled = time.Now().Add(-1) // a tick at the instant of AddPeriodic is enqueued
	synctest.Wait()
}

// ticks returns the ticks in (after, to].
func (d *tickDriver) ticks(after, to time.Time) []time.Time {
	var out []time.Time
	for t := d.s.Next(after); !t.IsZero() && !t.After(to); t = d.s.Next(t) {
		out = append(out, t)
	}
	return out
}

// run lets dur pass: every tick in it gets its job at its instant.
func (d *tickDriver) run(dur time.Duration) {
	sleep(dur)
	now := time.Now()
	for _, t := range d.ticks(d.handled, now) {
		d.want = append(d.want, wantTick{t, t})
	}
	d.handled = now
}

// pause stalls the scheduler on the next tick P for stall: when it goes on,
// P gets its job if younger than the retention, and of the ticks it
// missed only the latest does, if younger than the retention.
func (d *tickDriver) pause(stall time.Duration) (p, latest time.Time) {
	p = d.s.Next(time.Now())
	release := d.p.set(p)
	time.Sleep(time.Until(p.Add(stall)))
	synctest.Wait()
	now := time.Now()
	close(release)
	synctest.Wait()
	if now.Before(p.Add(d.ret)) {
		d.want = append(d.want, wantTick{p, now})
	}
	missed := d.ticks(p, now)
	if len(missed) > 0 {
		latest = missed[len(missed)-1]
		if now.Before(latest.Add(d.ret)) {
			d.want = append(d.want, wantTick{latest, now})
		}
	}
	d.handled = now
	return p, latest
}

// close closes the Router and checks it held exactly the jobs wanted: one
// per tick, with the tick's ID and payload, enqueued when wanted, and no
// other.
func (d *tickDriver) close() {
	t := d.t
	require.NoError(t, d.r.Close(context.Background()))
	var got []wantTick
	for _, e := range d.rec.ofKind(leaserouter.EventEnqueued) {
		tick, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(e.JobID, d.name+"@"))
		require.NoError(t, err, e.JobID)
		require.Equal(t, leaserouter.TickID(d.name, tick), e.JobID)
		got = append(got, wantTick{tick, e.Time.Round(0).UTC()})
	}
	want := make([]wantTick, len(d.want))
	for i, w := range d.want {
		want[i] = wantTick{w.tick.UTC(), w.at.Round(0).UTC()}
	}
	require.Equal(t, want, got, "router %d: the jobs of the ticks", d.routers)
	for _, w := range d.want {
		j := get(t, d.r, leaserouter.TickID(d.name, w.tick))
		require.Equal(t, tickPayload(w.tick), j.Payload)
		require.Equal(t, leaserouter.StatePending, j.State)
	}
	require.EqualValues(t, len(d.want), d.r.Stats().Enqueued)
	d.want = nil
}

// seen counts the ticks since the driver started.
func (d *tickDriver) seen() int { return len(d.ticks(d.start, time.Now())) }

// TestPeriodicOneJobPerTick: over 10,000 ticks of Every(time.Second), with
// pauses of the process and a Close and New in between, each tick at or
// after AddPeriodic gets exactly one job, ID TickID(name, tick), enqueued
// at the tick; a stalled scheduler enqueues only the latest tick it
// missed (and the one it was on), each only while younger than the
// retention; no tick before AddPeriodic nor while no Router runs gets one.
func TestPeriodicOneJobPerTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newTickDriver(t, "every", leaserouter.Every(time.Second), 3*time.Second)
		sleep(500 * time.Millisecond) // AddPeriodic between two ticks: the one before gets no job
		d.open()
		d.run(2000 * time.Second)
		require.Equal(t, d.handled.Add(-2000*time.Second).Truncate(time.Second).Add(time.Second), d.want[0].tick,
			"the first job is the first tick after AddPeriodic")
		p, latest := d.pause(5300 * time.Millisecond)
		require.Equal(t, p.Add(5*time.Second), latest)
		require.Equal(t, latest, d.want[len(d.want)-1].tick, "only the latest missed tick: the stalled one is past the retention")
		d.run(1000 * time.Second)
		p, latest = d.pause(2700 * time.Millisecond)
		require.Equal(t, []time.Time{p, latest}, []time.Time{d.want[len(d.want)-2].tick, d.want[len(d.want)-1].tick})
		d.run(500*time.Second + 300*time.Millisecond)
		d.close()

		sleep(100 * time.Second) // no Router: no job, and the next Router does not catch up
		sleep(time.Until(d.s.Next(time.Now())))
		d.open() // at a tick's instant: that tick gets its job
		d.run(time.Second)
		require.Equal(t, d.handled.Add(-time.Second), d.want[0].tick)
		for d.seen() < 10_000 {
			d.run(1000 * time.Second)
		}
		p, latest = d.pause(3 * time.Second) // the boundary: a tick exactly the retention old gets none
		require.Equal(t, latest, d.want[len(d.want)-1].tick)
		require.NotEqual(t, p, d.want[len(d.want)-2].tick)
		d.run(10 * time.Second)
		d.close()
		require.GreaterOrEqual(t, d.seen(), 10_000)
	})
}

// TestPeriodicCalendarOneJobPerTick is TestPeriodicOneJobPerTick on a
// calendar schedule in America/New_York across years of DST changes (a
// schedule without an interval, so Due steps through Next): one job per
// tick, none for a day's skipped 2 a.m., and a stalled scheduler whose
// latest missed tick is past the retention enqueues nothing.
func TestPeriodicCalendarOneJobPerTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newYork(t)
		d := newTickDriver(t, "ny", s, 20*time.Minute)
		sleep(17 * time.Minute)
		d.open()
		d.run(400 * 24 * time.Hour)
		p, latest := d.pause(70 * time.Minute) // 1:00 stalls until 2:10: 2:00 only
		require.Equal(t, 1, p.In(s.loc).Hour())
		require.Equal(t, latest, d.want[len(d.want)-1].tick)
		require.Equal(t, p.Add(time.Hour), latest)
		d.run(10 * 24 * time.Hour)
		n := len(d.want)
		d.pause(85 * time.Minute) // until 2:25: 2:00 is past the retention
		require.Len(t, d.want, n, "no job: every missed tick is past the retention")
		d.run(24 * time.Hour)
		d.close()
		sleep(3 * 24 * time.Hour)
		d.open()
		for d.seen() < 10_000 {
			d.run(100 * 24 * time.Hour)
		}
		d.close()

		// The run crossed DST changes: days with two ticks (2 a.m. skipped)
		// and a 90-minute gap (1:30 EDT to 2:00 EST).
		all := d.ticks(d.start, time.Now())
		require.GreaterOrEqual(t, len(all), 10_000)
		perDay := map[string]int{}
		gaps := map[time.Duration]int{}
		for i, tick := range all {
			perDay[tick.In(s.loc).Format(time.DateOnly)]++
			if i > 0 {
				gaps[tick.Sub(all[i-1])]++
			}
		}
		short := 0
		for _, n := range perDay {
			if n == 2 {
				short++
			}
		}
		require.GreaterOrEqual(t, short, 5, "spring-forward days")
		require.GreaterOrEqual(t, gaps[90*time.Minute], 5, "fall-back nights")
	})
}

// enqueued returns the IDs of the jobs enqueued on r, in order.
func enqueued(r *router) []string {
	var ids []string
	page, _ := r.List(leaserouter.ListParams{Limit: 1000})
	for _, j := range page.Jobs {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	return ids
}

// tickIDs returns TickID(name, t) for each of the ticks of s in (from, to].
func tickIDs(name string, s leaserouter.Schedule, from, to time.Time) []string {
	var ids []string
	for t := s.Next(from); !t.IsZero() && !t.After(to); t = s.Next(t) {
		ids = append(ids, leaserouter.TickID(name, t))
	}
	return ids
}

// scripted is a Schedule of the ticks listed, then none; or, past them, a
// Next that panics or does not move forward.
type scripted struct {
	ticks []time.Time
	after string // "", "panic" or "stuck"
}

func (s scripted) Next(t time.Time) time.Time {
	for _, tick := range s.ticks {
		if tick.After(t) {
			return tick
		}
	}
	switch s.after {
	case "panic":
		panic("bad schedule")
	case "stuck":
		return t
	}
	return time.Time{}
}

// TestPeriodicScheduleEndsAlone: a Schedule that returns the zero Time
// ends quietly; one whose Next panics or does not move forward ends
// reported (a panic counted in Stats.CallbackPanics); the other periodic
// job goes on; an ended one keeps its name until RemovePeriodic.
func TestPeriodicScheduleEndsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &routertest.LogRecorder{}
		r := setup(t, leaserouter.Options{Logger: slog.New(h)})
		now := time.Now()
		ticks := []time.Time{now.Add(time.Second), now.Add(3 * time.Second)}
		for _, name := range []string{"zero", "panic", "stuck"} {
			s := scripted{ticks: ticks}
			if name != "zero" {
				s.after = name
			}
			require.NoError(t, r.AddPeriodic(leaserouter.Periodic[string]{Name: name, Schedule: s}))
		}
		require.NoError(t, r.AddPeriodic(leaserouter.Periodic[string]{Name: "every", Schedule: leaserouter.Every(time.Second)}))
		sleep(10 * time.Second)
		// Due plans a wake-up whole: the failing Next is the one asked for
		// the tick after 3s, at 3s, so that wake-up enqueues nothing.
		want := []string{leaserouter.TickID("zero", ticks[0]), leaserouter.TickID("zero", ticks[1]),
			leaserouter.TickID("panic", ticks[0]), leaserouter.TickID("stuck", ticks[0])}
		want = append(want, tickIDs("every", leaserouter.Every(time.Second), now.Add(-1), time.Now())...)
		slices.Sort(want)
		require.Len(t, want, 4+11, "every: from the tick at AddPeriodic's instant")
		require.Equal(t, want, enqueued(r))
		require.EqualValues(t, 1, r.Stats().CallbackPanics, "the panic, not the stuck Next")
		require.NoError(t, r.Close(context.Background()))
		msgs := h.Errors()
		require.Len(t, msgs, 2, "%q", msgs)
		slices.Sort(msgs)
		require.Equal(t, `leaserouter: periodic job "panic": schedule's Next panicked: bad schedule; its schedule ended job_id=panic`, msgs[0])
		require.Equal(t, `leaserouter: periodic job "stuck": schedule's Next did not move forward: Next(2000-01-01T00:00:03Z) = 2000-01-01T00:00:03Z; its schedule ended job_id=stuck`, msgs[1])
	})
}

// TestPeriodicEnqueueErrors: ErrFull skips the tick, reported through the
// Logger, and the next tick is tried; ErrDuplicate (the tick's job is
// there already) is not an error.
func TestPeriodicEnqueueErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &routertest.LogRecorder{}
		r := setup(t, leaserouter.Options{Capacity: 1, Logger: slog.New(h)})
		sleep(500 * time.Millisecond)
		start := time.Now()
		every := leaserouter.Every(time.Second)
		first := every.Next(start)
		require.NoError(t, r.Enqueue(leaserouter.TickID("p", first), "mine"))
		require.NoError(t, r.AddPeriodic(leaserouter.Periodic[string]{Name: "p", Schedule: every}))
		sleep(time.Second) // first: a duplicate
		require.Equal(t, "mine", get(t, r, leaserouter.TickID("p", first)).Payload)
		sleep(time.Second) // second: full
		require.NoError(t, acquire(t, r, "w").Complete())
		sleep(time.Second) // third: enqueued
		require.Equal(t, []string{leaserouter.TickID("p", first), leaserouter.TickID("p", first.Add(2*time.Second))}, enqueued(r))
		require.NoError(t, r.Close(context.Background()))
		require.Equal(t, []string{
			`leaserouter: periodic job "p": leaserouter: router at capacity: 1 unfinished jobs; tick skipped job_id=` +
				leaserouter.TickID("p", first.Add(time.Second)),
		}, h.Errors())
	})
}

// TestPeriodicUserCodeOutsideLock: Next and Payload run with the router's
// lock free (checked with TryLock: a goroutine blocked on a mutex is not
// durably blocked for synctest, so a deadlock would hang, not fail), and
// may call the Router.
func TestPeriodicUserCodeOutsideLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		var mu sync.Mutex
		var locked []string
		check := func(what string) bool {
			if leaserouter.LockFree(r) {
				return true
			}
			mu.Lock()
			locked = append(locked, what)
			mu.Unlock()
			return false
		}
		s := nextFunc(func(t time.Time) time.Time {
			check("Next")
			return leaserouter.Every(time.Second).Next(t)
		})
		require.NoError(t, r.AddPeriodic(leaserouter.Periodic[string]{Name: "p", Schedule: s, Payload: func(tick time.Time) string {
			if !check("Payload") {
				return "" // calling the Router would deadlock
			}
			_ = r.RemovePeriodic("nothing")
			return fmt.Sprint(r.Stats().Enqueued)
		}}))
		sleep(3 * time.Second)
		require.EqualValues(t, 4, r.Stats().Enqueued, "the ticks at 0s (AddPeriodic's instant) to 3s")
		require.Equal(t, "3", get(t, r, leaserouter.TickID("p", time.Now())).Payload)
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, locked, "user code called under the router's lock")
	})
}

type nextFunc func(time.Time) time.Time

func (f nextFunc) Next(t time.Time) time.Time { return f(t) }

// TestPeriodicCloseStopsScheduler: Close waits for a Payload in progress
// only until its ctx is done (that it waits at all is the conformance row
// "periodic/Close waits for the scheduler"), and the goroutine ends once
// Payload returns, enqueuing nothing more; Close from Payload does not
// wait for itself.
func TestPeriodicCloseStopsScheduler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		entered, release := make(chan struct{}), make(chan struct{})
		require.NoError(t, r.AddPeriodic(leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(time.Second),
			Payload: func(time.Time) string {
				close(entered)
				<-release
				return ""
			}}))
		time.Sleep(time.Second)
		<-entered
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done := goClose(ctx, r)
		sleep(time.Minute - 1)
		requireBlocked(t, done)
		sleep(1)
		require.NoError(t, receive(t, done), "no lease to drain: ctx cut short only the wait for Payload")
		close(release)
		synctest.Wait()
		require.EqualValues(t, 0, r.Stats().Enqueued, "the tick of a Payload that returned after Close")

		r2 := setup(t, leaserouter.Options{})
		closed := make(chan error, 1)
		require.NoError(t, r2.AddPeriodic(leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(time.Second),
			Payload: func(time.Time) string {
				closed <- r2.Close(context.Background())
				return ""
			}}))
		sleep(time.Second)
		require.NoError(t, receive(t, closed))
		require.EqualValues(t, 0, r2.Stats().Enqueued)
	})
}

// TestPeriodicCloseFromPayloadDuringCloseDoesNotWait: a Payload in
// progress as another goroutine's Close begins, which then calls Close
// itself (on an error, say), does not wait for that first Close: the
// first Close waits for this very Payload to return, so a wait there is a
// deadlock, cut only by a ctx. Close from OnEvent returns nil at once in
// the same case; Close from Payload must too.
func TestPeriodicCloseFromPayloadDuringCloseDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		entered, release := make(chan struct{}), make(chan struct{})
		inner := make(chan error, 1)
		require.NoError(t, r.AddPeriodic(leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(time.Second),
			Payload: func(time.Time) string {
				close(entered)
				<-release
				// Bounded so that the test ends when the bug is there.
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				inner <- r.Close(ctx)
				return ""
			}}))
		time.Sleep(time.Second)
		<-entered
		outer := goClose(context.Background(), r) // waits for the Payload in progress
		synctest.Wait()
		requireBlocked(t, outer)
		close(release)
		sleep(time.Minute) // far less than the inner Close's ctx
		select {
		case err := <-inner:
			require.NoError(t, err)
		default:
			t.Error("Close from the Payload the first Close waits for is waiting for that Close: a deadlock until its ctx is done")
		}
		sleep(time.Hour) // let the bug's wait end, so that the bubble ends
		require.NoError(t, receive(t, outer))
	})
}
