// Package contract holds the rules of the leaserouter contract that both
// backends keep — the in-process Router (the module root) and pgrouter —
// each written once, as a function both call, so the two cannot drift.
// One file per family:
//
//   - contract.go: Router options both backends have (CheckOptions), and
//     Recovered, the one way user code is called with its panic caught;
//   - enqueue.go: Enqueue's options and their checks
//     (ReadEnqueueOptions), and the rule for IDs and names (ValidateID,
//     ValidateWorkerID, NameProblem);
//   - worker.go: Run's options and defaults (WorkerDefaults), the
//     heartbeat interval, the next batch's size and what Run does with a
//     handler's return (AfterHandler);
//   - outcome.go: how a lease ends: Fail's cause (FailCause, Permanent,
//     "unknown error", "attempts exhausted"), a recovered Backoff, a
//     snooze's delay (CheckSnooze), the holder's own ends (EndedByHolder);
//   - periodic.go: AddPeriodic's checks (CheckPeriodic) and a tick's ID;
//   - event.go: the event backlog's bound, the reports of hooks that panic,
//     and History's counters;
//   - bulk.go: the bulk calls' arguments.
//
// The conformance suite both backends run, internal/routertest, has a row
// for each rule. This package depends on the standard library and other
// internal packages only: the errors.Is targets (ErrInvalidOptions, ...)
// are the core's and are passed in, since this package cannot import the
// core (the core imports it). Types the core exports and pgrouter must
// read are defined here and the core's types defined on them
// (leaserouter.EnqueueOption is a type defined on EnqueueOption, and
// leaserouter.WorkerOptions converts to WorkerOptions), so nothing is
// copied or exported from the root for pgrouter alone.
package contract

import (
	"fmt"
	"math"
	"time"
)

// CheckOptions checks the Options fields both backends share, with one
// set of messages: an error wrapping errInvalid naming the first bad
// field, or nil. minLease is the backend's shortest positive
// LeaseDuration (0: any positive one); defaultLease and defaultAttempts
// are the defaults a zero field gets, named in the messages.
func CheckOptions(errInvalid error, lease, minLease, defaultLease time.Duration, maxAttempts, defaultAttempts int, tokenFloor uint64) error {
	switch {
	case lease < 0:
		return fmt.Errorf("%w: LeaseDuration is %v, must be > 0 (or 0 for the default %v)", errInvalid, lease, defaultLease)
	case lease > 0 && lease < minLease:
		return fmt.Errorf("%w: LeaseDuration is %v, must be >= %v on this backend (or 0 for the default %v)", errInvalid, lease, minLease, defaultLease)
	case maxAttempts < 0:
		return fmt.Errorf("%w: MaxAttempts is %d, must be >= 1 (or 0 for the default %d)", errInvalid, maxAttempts, defaultAttempts)
	case maxAttempts > math.MaxInt32:
		return fmt.Errorf("%w: MaxAttempts is %d, must be <= %d", errInvalid, maxAttempts, math.MaxInt32)
	case tokenFloor >= math.MaxInt64:
		return fmt.Errorf("%w: TokenFloor is %d, must be < %d so tokens fit in an int64", errInvalid, tokenFloor, uint64(math.MaxInt64))
	}
	return nil
}

// Recovered calls f and returns what it panicked with, or nil.
func Recovered(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}
