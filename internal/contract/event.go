package contract

import (
	"fmt"
	"log/slog"
)

// Events, on every backend: the bound of the backlog waiting for
// delivery, the reports of hooks that panic or call runtime.Goexit, and
// how those reports are logged. The stepping of a delivery goroutine
// through the hooks, and the producers' wait for room, are
// internal/delivery's.

// EventBacklog bounds the events waiting for delivery that new work may
// add, on every backend: a producer of new work (Enqueue, a claim) that
// finds this many undelivered waits until delivery has brought the
// backlog down to half; one that finds fewer goes on (delivery.Room);
// lease operations never wait.
const EventBacklog = 16384

// BacklogFull reports whether a backlog of n undelivered events makes
// producers of new work wait (n >= EventBacklog), on every backend.
func BacklogFull(n int) bool { return n >= EventBacklog }

// BacklogDrained reports whether a backlog of n undelivered events lets
// the waiting producers go on: delivery has brought it down to half (so a
// steady overload wakes producers in batches, not one per event).
func BacklogDrained(n int) bool { return n <= EventBacklog/2 }

// ProgressEvery is how many events a delivery goroutine delivers between
// updates of the backlog, so that waiting producers get room while a
// large batch is still being delivered.
const ProgressEvery = 256

// KindReport is the EventKind (0, no event's) of an entry of a backend's
// event queue that is not an event but the report of a recovered panic of
// a user callback (Backoff, say), for the delivery goroutine to log
// through the Logger: the operation that found the panic never pays for
// the Logger.
const KindReport = 0

// The hooks whose panics and Goexits delivery reports.
const (
	HookOnEvent = "OnEvent"
	HookLogger  = "Logger handler"
)

// HookPanicked is the report of a hook (HookOnEvent, HookLogger) that
// panicked with p on an event of kind kind (its String).
func HookPanicked(hook string, kind fmt.Stringer, p any) string {
	return fmt.Sprintf("leaserouter: %s panicked on %s: %v", hook, kind, p)
}

// HookGoexit is the report of a hook that called runtime.Goexit (as
// t.FailNow does) on an event of kind kind.
func HookGoexit(hook string, kind fmt.Stringer) string {
	return fmt.Sprintf("leaserouter: %s called runtime.Goexit on %s", hook, kind)
}

// Report logs msg, the report of a user callback's recovered panic, at
// level Error with the key job_id, through logger, or slog.Default() when
// logger is nil or its handler panics too; it reports whether logger
// panicked (one more callback panic, for the caller to count). It runs
// user code: call it with no lock held, off the callers' path (the
// delivery goroutine).
func Report(logger *slog.Logger, msg, jobID string) (loggerPanicked bool) {
	if logger != nil {
		if ReportTo(logger, msg, jobID) {
			return false
		}
		loggerPanicked = true
	}
	ReportTo(slog.Default(), msg, jobID)
	return loggerPanicked
}

// ReportTo logs msg at level Error through l and reports whether it did
// (l's handler did not panic).
func ReportTo(l *slog.Logger, msg, jobID string) bool {
	return Recovered(func() { l.Error(msg, "job_id", jobID) }) == nil
}

// The counters of a minute of History, on every backend, in the order of
// leaserouter.Minute's fields: jobs completed (EventCompleted), failed
// attempts (EventFailed, retried or not), jobs that became dead
// (EventDead), leases that expired (EventLeaseExpired) and lease
// operations refused because the lease was lost (EventStaleRejected).
const (
	TallyCompleted = iota
	TallyFailed
	TallyDead
	TallyExpired
	TallyStale
	NumTallies
)
