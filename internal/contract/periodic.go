package contract

import (
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter/internal/periodic"
)

// Periodic jobs, on every backend: the checks of AddPeriodic and the ID
// of a tick's job.

// Schedule is leaserouter.Schedule: the ticks of a periodic job.
type Schedule interface {
	Next(t time.Time) time.Time
}

// MaxTickSuffix is the longest "@" + RFC3339Nano time stamp in UTC a
// time.Time can give: 31 bytes for years 0-9999
// ("@2006-01-02T15:04:05.999999999Z"), 40 for the signed 12-digit years
// at the ends of its range. A periodic job's Name leaves room for it.
const MaxTickSuffix = 40

// TickID is leaserouter.TickID: name + "@" + the tick in UTC, RFC 3339
// with nanoseconds.
func TickID(name string, tick time.Time) string {
	return name + "@" + tick.UTC().Format(time.RFC3339Nano)
}

// CheckPeriodic checks a Periodic's fields as AddPeriodic does on every
// backend, returning nil or an error wrapping errInvalid (the core's
// ErrInvalidOptions) that names the problem: an empty Name or one that
// breaks the rule for IDs with the tick's room taken (MaxTickSuffix), a
// nil Schedule, an Every(d) with d <= 0, an option Enqueue would refuse
// (that error, wrapping errInvalidJob, wrapped), or WithRunAt or
// WithDelay among opts (the tick is the run-at); or a negative retention,
// the router's Options.Retention (exactly one job per tick needs each
// tick's dedup record).
func CheckPeriodic[O AnyEnqueueOption](errInvalid, errInvalidJob error, name string, s Schedule, opts []O, retention time.Duration) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: Periodic.Name is empty", errInvalid)
	case s == nil:
		return fmt.Errorf("%w: Periodic %s has a nil Schedule", errInvalid, Quote(name))
	}
	if p := NameProblem(name, MaxIDBytes-MaxTickSuffix, "MaxIDBytes less the tick's room"); p != "" {
		return fmt.Errorf("%w: Periodic.Name %s", errInvalid, p)
	}
	if d, ok := s.(periodic.Every); ok && d <= 0 {
		return fmt.Errorf("%w: Periodic %s has Schedule Every(%v), the interval must be > 0", errInvalid, Quote(name), time.Duration(d))
	}
	var set EnqueueSettings
	if err := ReadEnqueueOptions(errInvalidJob, &set, TickID(name, time.Unix(0, 0)), opts); err != nil {
		return fmt.Errorf("%w: Periodic %s: %w", errInvalid, Quote(name), err)
	}
	if set.timed {
		return fmt.Errorf("%w: Periodic %s has WithRunAt or WithDelay among its Options: the tick is the run-at", errInvalid, Quote(name))
	}
	if retention < 0 {
		return fmt.Errorf("%w: Periodic %s needs Options.Retention >= 0 (is %v): exactly one job per tick needs each tick's dedup record",
			errInvalid, Quote(name), retention)
	}
	return nil
}

// PayloadPanicked is the report of a periodic job's Payload that panicked
// with p: that tick is skipped, on every backend.
func PayloadPanicked(name string, p any) string {
	return fmt.Sprintf("leaserouter: Payload of periodic job %s panicked: %v; tick skipped", Quote(name), p)
}

// TickSkipped is the report of a tick whose job could not be enqueued
// (err), other than as a duplicate or on a closed router: that tick is
// skipped, on every backend.
func TickSkipped(name string, err error) string {
	return fmt.Sprintf("leaserouter: periodic job %s: %v; tick skipped", Quote(name), err)
}
