package contract

import "time"

// The names pgrouter calls until it moves to CheckSnooze and
// HandlerOutcome; removed with that move.

// SnoozeDelay is CheckSnooze.
func SnoozeDelay(errInvalid error, d time.Duration) error { return CheckSnooze(errInvalid, d) }

// AfterHandler is HandlerOutcome of an error that is no snooze.
func AfterHandler(err error, stopping bool) Outcome { return HandlerOutcome(err, stopping, 0, false) }
