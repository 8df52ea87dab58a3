package leaserouter

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The errors of the package: the Err* values for errors.Is, and the typed
// errors callers read fields of (LeaseLostError, StaleTokenError).

// Errors returned by the package, for errors.Is. Messages start with
// "leaserouter:"; returned errors may wrap them with more context.
var (
	// ErrLeaseLost: an operation on a lease that is no longer valid (expired,
	// superseded, ended, revoked by Close). The error is a *LeaseLostError.
	ErrLeaseLost = errors.New("leaserouter: lease lost")
	// ErrStaleToken: a Fence refused a token lower than one it has admitted.
	// The error is a *StaleTokenError.
	ErrStaleToken = errors.New("leaserouter: stale fencing token")
	// ErrDuplicate: Enqueue of an ID the router still knows.
	ErrDuplicate = errors.New("leaserouter: duplicate job ID")
	// ErrNotFound: Cancel, Retry or Delete of an ID the router does not
	// know.
	ErrNotFound = errors.New("leaserouter: job not found")
	// ErrNotFinished: Retry of a job that is not finished (pending,
	// scheduled or leased): only a succeeded, dead or canceled job can
	// run again.
	ErrNotFinished = errors.New("leaserouter: job not finished")
	// ErrNotScheduled: RunNow of a job that is not scheduled (pending,
	// leased or finished): only a job waiting for its run-at, a delay or
	// a retry's backoff, can be made to run now.
	ErrNotScheduled = errors.New("leaserouter: job not scheduled")
	// ErrLeased: Delete of a leased job; cancel it first (Cancel ends the
	// lease, its holder refused from then on).
	ErrLeased = errors.New("leaserouter: job is leased")
	// ErrNoJob: TryAcquire found no job ready.
	ErrNoJob = errors.New("leaserouter: no job ready")
	// ErrClosed: the Router is closed (or closing) and takes no new work.
	ErrClosed = errors.New("leaserouter: router closed")
	// ErrFull: Enqueue would exceed Options.Capacity.
	ErrFull = errors.New("leaserouter: router at capacity")
	// ErrInvalidOptions: a bad Options or WorkerOptions field, nil handler,
	// or a bad argument to KeepAlive or Fence.Do. The message names it.
	ErrInvalidOptions = errors.New("leaserouter: invalid options")
	// ErrInvalidJob: a bad argument to Enqueue (empty ID, bad option).
	ErrInvalidJob = errors.New("leaserouter: invalid job")
	// ErrTokensExhausted: the Router has issued the largest token that fits
	// in an int64 and can grant no more leases; make a new Router with a
	// lower TokenFloor. Unreachable in practice from the default floor.
	ErrTokensExhausted = errors.New("leaserouter: fencing tokens exhausted")
)

// LeaseLostError is returned by an operation on a lease that is no longer
// valid. errors.Is(err, ErrLeaseLost) is true; errors.As works with both a
// *LeaseLostError and a LeaseLostError target.
type LeaseLostError struct {
	JobID   string
	Token   Token      // the refused lease's token
	Current Token      // the job's latest token; 0 if the job is gone (purged)
	Reason  LostReason // why the lease ended; LostSuperseded whenever the job has a newer lease
}

// LostReason says why a lease was lost, as LeaseLostError.Reason gives
// it. The values are stable strings, so code may switch on the constants
// or compare with the strings.
type LostReason string

// The reasons a lease is lost.
const (
	LostExpired    LostReason = "expired"    // its expiry passed (whether or not the reaper had run)
	LostSuperseded LostReason = "superseded" // the job has a newer lease, whatever ended this one
	LostReleased   LostReason = "released"   // its holder released it
	LostFailed     LostReason = "failed"     // its holder failed the attempt
	LostCompleted  LostReason = "completed"  // its holder completed the job
	LostCanceled   LostReason = "canceled"   // Router.Cancel canceled the job
	LostRevoked    LostReason = "revoked"    // Close revoked it
	LostSnoozed    LostReason = "snoozed"    // its holder snoozed the job (Lease.Snooze)
	LostNilLease   LostReason = "nil lease"  // the operation was on a nil *Lease
)

// Error describes the refused lease, the current token and the reason.
func (e LeaseLostError) Error() string {
	return fmt.Sprintf("leaserouter: lease lost: job %q token %d (current %d): %s", e.JobID, e.Token, e.Current, e.Reason)
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// As lets errors.As fill a LeaseLostError value as well as a pointer.
func (e *LeaseLostError) As(target any) bool {
	if t, ok := target.(*LeaseLostError); ok {
		*t = *e
		return true
	}
	return false
}

// errNilLease returns the error of an operation on a nil *Lease: a fresh
// one each time, so a caller that edits it through errors.As changes no
// other caller's.
func errNilLease() error { return &LeaseLostError{Reason: LostNilLease} }

// StaleTokenError is returned by Fence.Admit and Fence.Do when a token is
// lower than the highest one already admitted for the key: its holder's lease
// has been superseded. errors.Is(err, ErrStaleToken) is true.
type StaleTokenError struct {
	Key     string
	Token   Token // the refused token
	Highest Token // the highest token admitted for Key so far
}

// Error describes the refused token, its key and the highest admitted.
func (e StaleTokenError) Error() string {
	return fmt.Sprintf("leaserouter: stale fencing token %d for key %q (highest admitted %d)", e.Token, e.Key, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// As lets errors.As fill a StaleTokenError value as well as a pointer.
func (e *StaleTokenError) As(target any) bool {
	if t, ok := target.(*StaleTokenError); ok {
		*t = *e
		return true
	}
	return false
}

// TimeoutError is the cause of a Run handler's ctx canceled at its
// attempt's timeout (WorkerOptions.Timeout, WithTimeout): context.Cause
// gives it, errors.Is(err, context.DeadlineExceeded) is true of it, and
// ctx.Err() is context.DeadlineExceeded. The lease is not lost by a
// timeout.
type TimeoutError struct {
	JobID   string
	Token   Token         // the attempt's lease
	Timeout time.Duration // the limit that passed
}

// Error names the job, the token and the limit.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("leaserouter: attempt of job %q (token %d) timed out after %v", e.JobID, e.Token, e.Timeout)
}

// Unwrap returns context.DeadlineExceeded.
func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }
