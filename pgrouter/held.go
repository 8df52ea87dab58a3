package pgrouter

import "time"

// heldUntil is Event.Held of a lease granted at granted (the row's
// leased_at; nil for a lease granted before schema version 4) and ended
// at end: how long it was held, 0 if unknown.
func heldUntil(granted *time.Time, end time.Time) time.Duration {
	if granted == nil {
		return 0
	}
	return max(0, end.Sub(*granted))
}
