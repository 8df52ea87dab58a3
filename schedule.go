package leaserouter

import (
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/periodic"
)

// Periodic jobs: what a schedule is and how a tick becomes a job, the
// same on every backend. The core's scheduler is in periodic_scheduler.go.

// Schedule gives the instants a periodic job is due at (its ticks). Next
// returns the first tick strictly after t, or the zero Time for no more
// ticks. It is called outside every lock, from the scheduler's goroutine
// (a panic is recovered and ends that periodic job's schedule, reported
// at level Error), and must not block. robfig/cron/v3's parsed schedules
// satisfy it as they are (cron.ParseStandard("*/5 * * * *"), with
// "CRON_TZ=Europe/Paris ..." for a time zone), so the core needs no cron
// parser of its own.
//
// A scheduler finds the latest due tick by stepping through Next (Every's
// is computed at once), at most 65,536 calls per turn: a schedule with
// more ticks than that since its last wake-up (ticks nanoseconds apart,
// or after a long pause) is stepped through over several turns, and
// between two turns every other periodic job due is handled. So one
// schedule's cost delays another periodic job's tick by at most one turn,
// on every backend. A schedule whose ticks come faster than its Next can
// step through them never reaches the present and enqueues no tick.
type Schedule interface {
	Next(t time.Time) time.Time
}

// Every returns the Schedule of a fixed interval d aligned to the Unix
// epoch: its ticks are the instants that are whole multiples of d since
// 1970-01-01T00:00:00Z (Every(time.Hour) ticks on the hour in UTC, and
// processes started at different moments agree on every tick). A d <= 0
// gives a schedule with no ticks, which AddPeriodic refuses with
// ErrInvalidOptions.
func Every(d time.Duration) Schedule { return periodic.Every(d) }

// Periodic is a job enqueued on a Schedule: one job per tick, whatever
// the number of schedulers (processes, Routers on one job set) that run it.
type Periodic[T any] struct {
	// Name identifies the periodic job on its Router (pgrouter: its
	// queue) and starts the ID of every job it makes (see TickID). It
	// follows the rule for IDs (see MaxIDBytes) with room for the tick
	// ("@" and a time stamp, up to 40 bytes).
	Name string
	// Schedule gives the ticks. Required.
	Schedule Schedule
	// Payload gives the payload of the job of a tick; nil gives the zero
	// T. It is called outside every lock, on the scheduler's goroutine; a
	// panic is recovered and skips that tick (reported at level Error).
	// The tick is an instant; its Location is the one Schedule.Next
	// returns for the scheduler's clock reading (a robfig/cron schedule
	// keeps its argument's: UTC on pgrouter, time.Local in the core), so
	// format a calendar date with tick.In(loc) for the schedule's zone.
	Payload func(tick time.Time) T
	// Options apply to every job it makes (WithPriority, WithMaxAttempts,
	// WithTimeout); WithRunAt and WithDelay are refused: the tick is the
	// run-at.
	Options []EnqueueOption
}

// TickID returns the job ID of the tick of the periodic job named name:
// name + "@" + tick.UTC().Format(time.RFC3339Nano), such as
// "report@2026-11-25T09:00:00Z". Every scheduler computes the same ID for
// a tick, whatever its clock or time zone, so the dedup of IDs makes one
// job per tick.
func TickID(name string, tick time.Time) string { return contract.TickID(name, tick) }
