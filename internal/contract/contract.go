// Package contract holds the rules of the leaserouter contract that both
// backends apply in code of their own — the in-process Router (the module
// root) and pgrouter — written once, so the two cannot drift: option
// validation and its messages, the event backlog's bound, a recovered
// Backoff, how a Run worker sizes its next batch, the error a panicking
// handler fails its attempt with, the heartbeat interval KeepAlive and
// Run use, and the reports of user callbacks that panic. It depends on the
// standard library only; the errors.Is targets (ErrInvalidOptions, ...)
// are the core's and are passed in, since this package cannot import the
// core (the core imports it).
package contract

import (
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"time"
)

// EventBacklog bounds the events waiting for delivery that new work may
// add, on every backend: producers of new work (Enqueue, claims) wait
// while this many are undelivered, until delivery has brought the backlog
// down to half; lease operations never wait.
const EventBacklog = 16384

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

// Backoff returns backoff(attempt), or fallback(attempt) and the
// recovered panic as an error (its message says what happened) when
// backoff panics. The caller counts the panic (Stats.CallbackPanics) and
// reports the error (Report), as it would any callback's panic.
func Backoff(backoff, fallback func(int) time.Duration, attempt int) (d time.Duration, panicked error) {
	if p := Recovered(func() { d = backoff(attempt) }); p != nil {
		return fallback(attempt), fmt.Errorf("leaserouter: Backoff(%d) panicked: %v; used DefaultBackoff", attempt, p)
	}
	return d, nil
}

// Recovered calls f and returns what it panicked with, or nil.
func Recovered(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// NextBatch is the size of a Run worker's next batch, from the last one:
// size was its size, limit is WorkerOptions.Batch, cut says it was cut (a
// heartbeat found jobs still waiting their turn, or the Run stopped), took
// is how long it ran. One job at a time after a cut batch (a job turned
// out long); twice as many (up to limit) after a batch that took at most a
// quarter of interval, the heartbeat interval; half as many (at least
// one) after one that took over half of it; the same otherwise.
func NextBatch(size, limit int, cut bool, took, interval time.Duration) int {
	switch {
	case cut:
		return 1
	case took <= interval/4:
		return min(2*size, limit)
	case took > interval/2:
		return max(1, size/2)
	}
	return size
}

// PanicError is the error a handler's panic fails its attempt with, on
// every backend: its message, Job.LastError, is "panic: <value>" and the
// goroutine's stack.
type PanicError struct {
	Value any
	Stack []byte
}

// Panicked returns the PanicError of a panic with value p, with the
// caller's stack (call it from the deferred func that recovered p).
func Panicked(p any) *PanicError { return &PanicError{Value: p, Stack: debug.Stack()} }

// Error gives the panic value and the stack, as Job.LastError shows them.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack) }

// MinHeartbeatInterval is the floor of a heartbeat interval, for Run and
// KeepAlive on every backend: a shorter positive interval is raised to it
// (or to a quarter of LeaseDuration, if that is shorter), so a typo such
// as 1ns cannot turn heartbeats into a busy loop.
const MinHeartbeatInterval = time.Millisecond

// HeartbeatInterval is the interval Run and KeepAlive use when asked for
// interval with leases of lease: lease/3 for interval <= 0, and never
// below the floor (see MinHeartbeatInterval). The caller refuses a result
// >= lease (KeepAliveInterval).
func HeartbeatInterval(interval, lease time.Duration) time.Duration {
	if interval <= 0 {
		return max(lease/3, 1)
	}
	return max(interval, min(MinHeartbeatInterval, lease/4))
}

// KeepAliveNilLease is the cause of the context KeepAlive of a nil (or
// zero) lease returns, canceled at once.
func KeepAliveNilLease(errInvalid error) error {
	return fmt.Errorf("leaserouter: KeepAlive of a nil *Lease: %w", errInvalid)
}

// KeepAliveInterval is the cause of the context KeepAlive returns,
// canceled at once, for an interval (after HeartbeatInterval) >= lease: it
// could never keep the lease.
func KeepAliveInterval(errInvalid error, interval, lease time.Duration) error {
	return fmt.Errorf("%w: KeepAlive interval %v must be < LeaseDuration %v", errInvalid, interval, lease)
}

// SnoozeDelay is the error of Lease.Snooze for a negative delay d (nil
// for d >= 0), which a Run handler's Snooze(d) also fails its attempt
// with.
func SnoozeDelay(errInvalid error, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: Snooze(%v), must be >= 0", errInvalid, d)
	}
	return nil
}

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

// Outcome is what Run does with a lease once its handler has returned,
// if the lease was not lost meanwhile (then Run leaves the job alone: its
// new state was decided by whoever ended the lease).
type Outcome int

// The outcomes of a handler's return.
const (
	Complete Outcome = iota // the job succeeded
	Release                 // handed back: pending again, the attempt counted
	Fail                    // a failed attempt: retried after Backoff, or dead
)

// AfterHandler is Run's decision once a handler returned err, on every
// backend: nil completes the job, even when Run is stopping (the work is
// done); an error releases it when stopping is set (Run's ctx is done or
// Close began, or the lease could not be proven valid: the error may be
// the stop's doing, not the job's), and fails the attempt otherwise.
func AfterHandler(err error, stopping bool) Outcome {
	switch {
	case err == nil:
		return Complete
	case stopping:
		return Release
	}
	return Fail
}

// EndedByHolder reports whether a lease that ended for reason (a
// leaserouter.LostReason) was ended by its own holder: completed,
// failed, released (a Run's hand-back of a lease it never started
// included) or snoozed, rather than lost (expired, canceled, revoked,
// superseded). Such an end is no refusal, on every backend: a heartbeat
// of the lease's KeepAlive that races it (lands after it, before the
// KeepAlive is stopped) counts nothing (no StaleRejections, no
// HeartbeatsRefused, no stale_rejected event), and the KeepAlive's
// context is canceled at once, with a *LeaseLostError whose Reason is
// that end as its cause.
func EndedByHolder(reason string) bool {
	switch reason {
	case "completed", "failed", "released", "snoozed":
		return true
	}
	return false
}
