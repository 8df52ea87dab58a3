package contract

import "time"

// The names pgrouter calls until it moves to CheckSnooze, HandlerOutcome
// and RouterDefaults; removed with that move.

// SnoozeDelay is CheckSnooze.
func SnoozeDelay(errInvalid error, d time.Duration) error { return CheckSnooze(errInvalid, d) }

// AfterHandler is HandlerOutcome of an error that is no snooze.
func AfterHandler(err error, stopping bool) Outcome { return HandlerOutcome(err, stopping, 0, false) }

// CheckOptions is RouterDefaults' check.
func CheckOptions(errInvalid error, lease, minLease, _ time.Duration, maxAttempts, _ int, tokenFloor uint64) error {
	_, err := RouterDefaults(errInvalid, RouterOptions{LeaseDuration: lease, MaxAttempts: maxAttempts, TokenFloor: tokenFloor}, minLease)
	return err
}
