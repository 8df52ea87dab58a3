// Package contract holds the rules of the leaserouter contract that both
// backends keep — the in-process Router (the module root) and pgrouter —
// each written once, as a function both call, so the two cannot drift.
// One file per family:
//
//   - contract.go: the Options both backends have (RouterDefaults), and
//     Recovered, the one way user code is called with its panic caught;
//   - enqueue.go: Enqueue's options and their checks
//     (ReadEnqueueOptions), and the rule for IDs and names (ValidateID,
//     ValidateWorkerID, CheckJobID, NameProblem);
//   - worker.go: Run's options and defaults (WorkerDefaults), the
//     heartbeat interval, the next batch's size (NextBatch), when a Run
//     starts no more jobs (Stopping), the handler's call with its panic
//     caught (CallHandler, Panicked) and what Run does with its return
//     (AfterHandler), a claim's max (ClaimMax);
//   - outcome.go: how a lease ends: Fail's cause (FailCause, Permanent,
//     "unknown error", "attempts exhausted"), a recovered Backoff, a
//     snooze's delay (CheckSnooze), the holder's own ends (EndedByHolder);
//   - client.go: a Client's names (CheckKindName, DefaultQueue), its
//     kinds' options, the middleware chain (Chain), and its hooks
//     serial across queues (HookLock);
//   - lifecycle.go: a Client's lifecycle (Lifecycle: New, Started,
//     Stopped; Register's and Start's checks, the Run goroutines, Stop);
//   - periodic.go: AddPeriodic's checks (CheckPeriodic) and a tick's ID;
//   - event.go: the event backlog's bound, the reports of hooks that panic,
//     and History's counters;
//   - admin.go: the admin reads' checks (ListFilter, LeasesLimit);
//   - bulk.go: the bulk calls' arguments.
//
// The conformance suite both backends run, internal/routertest, tests
// these rules through each backend. This package depends on the standard
// library and other internal packages only: the errors.Is targets
// (ErrInvalidOptions, ...) are the core's and are passed in, since this
// package cannot import the core (the core imports it). Types the core exports and pgrouter must
// read are defined here and the core's types defined on them
// (leaserouter.EnqueueOption is a type defined on EnqueueOption), or
// passed field by field (WorkerDefaults), so nothing is copied or
// exported from the root for pgrouter alone.
package contract

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// The defaults of the Options fields every backend has
// (leaserouter.DefaultLeaseDuration, DefaultMaxAttempts, DefaultRetention).
const (
	DefaultLeaseDuration = 30 * time.Second
	DefaultMaxAttempts   = 5
	DefaultRetention     = 10 * time.Minute
)

// DefaultBackoff is leaserouter.DefaultBackoff: exponential from 1s
// (attempt 1) doubling per attempt, capped at 5m, with "equal jitter" (a
// random duration in [d/2, d)); attempt < 1 is treated as 1.
func DefaultBackoff(attempt int) time.Duration {
	const base, ceiling = time.Second, 5 * time.Minute
	d := ceiling
	if attempt < 1 {
		attempt = 1
	}
	if attempt <= 9 { // 1s<<9 > 5m: past that the cap applies
		d = min(base<<(attempt-1), ceiling)
	}
	return d/2 + rand.N(d/2)
}

// RouterOptions are the Options fields every backend has.
type RouterOptions struct {
	LeaseDuration time.Duration
	MaxAttempts   int
	Backoff       func(attempt int) time.Duration
	Retention     time.Duration
	TokenFloor    uint64
}

// RouterDefaults checks o, with one set of messages, and returns it with
// its zero fields set to their defaults (a nil Backoff to
// DefaultBackoff), or an error wrapping errInvalid (the core's
// ErrInvalidOptions) naming the first bad field: a negative
// LeaseDuration, or a positive one below minLease (the backend's
// shortest; 0: any), a MaxAttempts negative or above math.MaxInt32, a
// TokenFloor that leaves no int64 token. A negative Retention is valid
// (finished jobs dropped at once).
func RouterDefaults(errInvalid error, o RouterOptions, minLease time.Duration) (RouterOptions, error) {
	switch {
	case o.LeaseDuration < 0:
		return o, fmt.Errorf("%w: LeaseDuration is %v, must be > 0 (or 0 for the default %v)", errInvalid, o.LeaseDuration, DefaultLeaseDuration)
	case o.LeaseDuration > 0 && o.LeaseDuration < minLease:
		return o, fmt.Errorf("%w: LeaseDuration is %v, must be >= %v on this backend (or 0 for the default %v)", errInvalid, o.LeaseDuration, minLease, DefaultLeaseDuration)
	case o.MaxAttempts < 0:
		return o, fmt.Errorf("%w: MaxAttempts is %d, must be >= 1 (or 0 for the default %d)", errInvalid, o.MaxAttempts, DefaultMaxAttempts)
	case o.MaxAttempts > math.MaxInt32:
		return o, fmt.Errorf("%w: MaxAttempts is %d, must be <= %d", errInvalid, o.MaxAttempts, math.MaxInt32)
	case o.TokenFloor >= math.MaxInt64:
		return o, fmt.Errorf("%w: TokenFloor is %d, must be < %d so tokens fit in an int64", errInvalid, o.TokenFloor, uint64(math.MaxInt64))
	}
	o.LeaseDuration = cmp.Or(o.LeaseDuration, DefaultLeaseDuration)
	o.MaxAttempts = cmp.Or(o.MaxAttempts, DefaultMaxAttempts)
	o.Retention = cmp.Or(o.Retention, DefaultRetention)
	if o.Backoff == nil { // a func is not comparable: no cmp.Or
		o.Backoff = DefaultBackoff
	}
	return o, nil
}

// Recovered calls f and returns what it panicked with, or nil.
func Recovered(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}
