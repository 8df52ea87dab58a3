package leaserouter_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// onlyNext has Next and nothing else: a Schedule needs no more (robfig/cron's
// parsed schedules are such types).
type onlyNext struct{}

func (onlyNext) Next(t time.Time) time.Time { return t.Add(time.Hour) }

var _ leaserouter.Schedule = onlyNext{}

// The tests of AddPeriodic and RemovePeriodic (periodic.go); those of the
// scheduler goroutine that enqueues the ticks are periodic_scheduler_test.go.

// TestPeriodicEndedKeepsName: an ended periodic job's name is taken until
// RemovePeriodic, which then succeeds.
func TestPeriodicEndedKeepsName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		p := leaserouter.Periodic[string]{Name: "once", Schedule: scripted{ticks: []time.Time{time.Now().Add(time.Second)}}}
		require.NoError(t, r.AddPeriodic(p))
		sleep(2 * time.Second)
		require.EqualValues(t, 1, r.Stats().Enqueued)
		require.ErrorIs(t, r.AddPeriodic(p), leaserouter.ErrInvalidOptions)
		require.NoError(t, r.RemovePeriodic("once"))
		require.NoError(t, r.AddPeriodic(p))
	})
}

// hourly is a valid periodic job whose next tick is far from the bad-input
// fixture's instants (1s past the hour): adding it enqueues nothing there.
func hourly(name string) leaserouter.Periodic[string] {
	return leaserouter.Periodic[string]{Name: name, Schedule: leaserouter.Every(time.Hour)}
}

// badPeriodicRows: every bad input of AddPeriodic and RemovePeriodic
// changes nothing and returns the documented error.
func badPeriodicRows() []badRow {
	add := func(name string, p leaserouter.Periodic[string], target error, contains string) badRow {
		return badRow{name: "AddPeriodic/" + name, run: func(t *testing.T, fx *badFx) {
			err := fx.r.AddPeriodic(p)
			require.ErrorIs(t, err, target)
			require.ErrorContains(t, err, contains)
			require.ErrorIs(t, fx.r.RemovePeriodic(p.Name), leaserouter.ErrNotFound, "not added")
		}}
	}
	withOpts := func(opts ...leaserouter.EnqueueOption) leaserouter.Periodic[string] {
		p := hourly("p")
		p.Options = opts
		return p
	}
	inv := leaserouter.ErrInvalidOptions
	room := leaserouter.MaxIDBytes - 40 // the tick's room: "@" and up to 39 bytes of time stamp
	rows := []badRow{
		add("empty Name is ErrInvalidOptions", hourly(""), inv, "Periodic.Name is empty"),
		add("Name of MaxIDBytes less the tick's room + 1 is ErrInvalidOptions", hourly(strings.Repeat("x", room+1)), inv,
			fmt.Sprintf("is %d bytes, above MaxIDBytes less the tick's room (%d)", room+1, room)),
		{name: "AddPeriodic/Name of MaxIDBytes less the tick's room is accepted", run: func(t *testing.T, fx *badFx) {
			name := strings.Repeat("é", room/2)
			require.NoError(t, fx.r.AddPeriodic(hourly(name)))
			require.NoError(t, fx.r.RemovePeriodic(name))
		}},
		add("Name with NUL is ErrInvalidOptions", hourly("a\x00b"), inv, "NUL at byte 1"),
		add("Name of invalid UTF-8 is ErrInvalidOptions", hourly("ab\xffc"), inv, "not valid UTF-8 at byte 2"),
		add("Name of 1 MiB is ErrInvalidOptions", hourly(strings.Repeat("x", 1<<20)), inv, "is 1048576 bytes"),
		add("nil Schedule is ErrInvalidOptions", leaserouter.Periodic[string]{Name: "p"}, inv, `Periodic "p" has a nil Schedule`),
		add("Every(0) is ErrInvalidOptions", leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(0)}, inv, "Every(0s), the interval must be > 0"),
		add("Every(-1s) is ErrInvalidOptions", leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(-time.Second)}, inv, "Every(-1s)"),
		add("WithRunAt is ErrInvalidOptions", withOpts(leaserouter.WithRunAt(time.Now().Add(time.Hour))), inv, "WithRunAt or WithDelay among its Options"),
		add("WithRunAt(zero) is ErrInvalidOptions", withOpts(leaserouter.WithRunAt(time.Time{})), inv, "WithRunAt or WithDelay"),
		add("WithDelay is ErrInvalidOptions", withOpts(leaserouter.WithDelay(time.Second)), inv, "WithRunAt or WithDelay"),
		add("WithDelay(-1) is ErrInvalidOptions", withOpts(leaserouter.WithDelay(-1)), inv, "WithDelay"),
		add("WithMaxAttempts(0) is ErrInvalidOptions and ErrInvalidJob", withOpts(leaserouter.WithMaxAttempts(0)), leaserouter.ErrInvalidJob, "WithMaxAttempts(0)"),
		add("WithTimeout(-1) is ErrInvalidOptions and ErrInvalidJob", withOpts(leaserouter.WithTimeout(-1)), inv, "WithTimeout(-1ns)"),
		{name: "AddPeriodic/Name already added is ErrInvalidOptions", prep: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.AddPeriodic(hourly("p")))
		}, run: func(t *testing.T, fx *badFx) {
			err := fx.r.AddPeriodic(leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(time.Second)})
			require.ErrorIs(t, err, inv)
			require.ErrorContains(t, err, `Periodic "p" is already added on this Router`)
			sleep(5 * time.Second) // the first one's schedule, not the refused one's: no job (and the leases live on)
			require.NoError(t, fx.r.RemovePeriodic("p"))
		}},
		{name: "AddPeriodic/Options.Retention < 0 is ErrInvalidOptions", own: true, run: func(t *testing.T, _ *badFx) {
			r := setup(t, leaserouter.Options{Retention: -1})
			err := r.AddPeriodic(hourly("p"))
			require.ErrorIs(t, err, inv)
			require.ErrorContains(t, err, "Options.Retention >= 0 (is -1ns)")
			require.Equal(t, leaserouter.Stats{}, r.Stats())
		}},
		{name: "AddPeriodic/nil Router is ErrClosed", own: true, run: func(t *testing.T, _ *badFx) {
			var r *router
			require.ErrorIs(t, r.AddPeriodic(hourly("p")), leaserouter.ErrClosed)
			require.ErrorIs(t, r.RemovePeriodic("p"), leaserouter.ErrClosed, "RemovePeriodic too")
		}},
		badAfterClose("AddPeriodic is ErrClosed", func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.AddPeriodic(hourly("p")), leaserouter.ErrClosed)
			require.ErrorIs(t, fx.r.AddPeriodic(hourly("")), inv, "the periodic job is checked first, as Enqueue's job is")
		}),
		{name: "after Close/AddPeriodic with a periodic job added before is ErrClosed", prep: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.AddPeriodic(hourly("p")))
			badCloseNow(t, fx)
		}, run: func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.AddPeriodic(hourly("q")), leaserouter.ErrClosed)
			sleep(2 * time.Hour) // no tick of p gets a job
		}},

		{name: "RemovePeriodic/unknown name with none added is ErrNotFound", run: func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.RemovePeriodic("p"), leaserouter.ErrNotFound)
		}},
		{name: "RemovePeriodic/unknown name is ErrNotFound and leaves the others", prep: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.AddPeriodic(hourly("p")))
		}, run: func(t *testing.T, fx *badFx) {
			for _, name := range []string{"q", "", "P", "p\x00", "p\xff", strings.Repeat("p", 1<<20)} {
				err := fx.r.RemovePeriodic(name)
				require.ErrorIs(t, err, leaserouter.ErrNotFound, "%q", name)
			}
			require.ErrorIs(t, fx.r.AddPeriodic(hourly("p")), inv, "p is still added")
			require.NoError(t, fx.r.RemovePeriodic("p"))
		}},
		{name: "RemovePeriodic/twice is ErrNotFound the second time", prep: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.AddPeriodic(hourly("p")))
		}, run: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.RemovePeriodic("p"))
			require.ErrorIs(t, fx.r.RemovePeriodic("p"), leaserouter.ErrNotFound)
		}},
		badAfterClose("RemovePeriodic with none added is ErrClosed", func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.RemovePeriodic("p"), leaserouter.ErrClosed)
		}),
		{name: "after Close/RemovePeriodic of a periodic job added before is ErrClosed", prep: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.AddPeriodic(hourly("p")))
			badCloseNow(t, fx)
		}, run: func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.RemovePeriodic("p"), leaserouter.ErrClosed)
			require.ErrorIs(t, fx.r.RemovePeriodic("q"), leaserouter.ErrClosed)
		}},
	}
	return rows
}
