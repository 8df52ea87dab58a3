package contract

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"time"
)

// Run's workers and KeepAlive, on every backend: WorkerOptions' checks
// and defaults, the heartbeat interval, the size of a worker's next batch
// and what Run does with a handler's return.

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

// Outcome is what Run does with a lease once its handler has returned,
// if the lease was not lost meanwhile (then Run leaves the job alone: its
// new state was decided by whoever ended the lease).
type Outcome int

// The outcomes of a handler's return.
const (
	Complete Outcome = iota // the job succeeded
	Release                 // handed back: pending again, the attempt counted
	Fail                    // a failed attempt, with the error AfterHandler returns: retried after Backoff, or dead
	Snooze                  // snoozed (Lease.Snooze) for the delay the handler asked for
)

// AfterHandler is Run's decision once a handler returned err, on every
// backend, and the error to fail the attempt with when that is the
// decision. snooze and snoozed are what leaserouter.SnoozeDelay finds in
// err. A snooze is the handler's request, kept even when Run is stopping
// (a release would count the attempt): Snooze for a delay >= 0; a
// negative one is the handler's mistake, not one it may not have had, so
// Fail with Lease.Snooze's error (CheckSnooze, wrapping errInvalid).
// Otherwise nil completes the job, even when Run is stopping (the work is
// done); an error releases it when stopping is set (Run's ctx is done,
// which cancels the handler's, or the lease could not be proven valid:
// the error may be the stop's doing, not the job's), and fails the
// attempt with err otherwise. Close's drain is no stop here: it cancels
// no handler before its own ctx ends.
func AfterHandler(errInvalid, err error, stopping bool, snooze time.Duration, snoozed bool) (Outcome, error) {
	switch {
	case snoozed && snooze < 0:
		return Fail, CheckSnooze(errInvalid, snooze)
	case snoozed:
		return Snooze, nil
	case err == nil:
		return Complete, nil
	case stopping:
		return Release, nil
	}
	return Fail, err
}

// Stopping reports whether a Run must start no more jobs, on every
// backend: its ctx (or a worker's, derived from it) is done, or Close
// has begun (closing: each backend reads its own sign of that, as
// cheaply as it can, since it is read before every job). It is checked
// before each job, so no job starts after either.
func Stopping(ctx context.Context, closing bool) bool {
	return closing || ctx.Err() != nil
}

// AttemptTimeout is the limit of an attempt under Run, on every backend:
// the job's own (WithTimeout) if it has one (> 0), else the Run's
// (WorkerOptions.Timeout); 0 for none.
func AttemptTimeout(job, run time.Duration) time.Duration {
	if job > 0 {
		return job
	}
	return run
}

// ClaimMax checks the max of a claim of several leases (call:
// "AcquireMany", "TryAcquireMany"): nil for max >= 1, else an error
// wrapping errInvalid (the core's ErrInvalidOptions).
func ClaimMax(errInvalid error, call string, max int) error {
	if max < 1 {
		return fmt.Errorf("%w: %s max is %d, must be >= 1", errInvalid, call, max)
	}
	return nil
}

// MaxWorkers is leaserouter.MaxWorkers: the most worker goroutines one
// Run starts.
const MaxWorkers = 1 << 16

// DefaultBatch and MaxBatch are leaserouter.DefaultBatch and MaxBatch:
// the default and the largest WorkerOptions.Batch.
const (
	DefaultBatch = 256
	MaxBatch     = 1024
)

// WorkerDefaults checks the fields of a leaserouter.WorkerOptions and
// sets its zero ones to their defaults, through pointers to them, for a
// router whose LeaseDuration is lease, as Run does first on every
// backend; a bad field returns an error wrapping errInvalid (the core's
// ErrInvalidOptions) naming the field, and then the fields may be
// half-set. Workers defaults to runtime.GOMAXPROCS(0), WorkerID to
// "<hostname>-<pid>", Batch to DefaultBatch and HeartbeatInterval as
// HeartbeatInterval says; Timeout is only checked. Every worker's ID,
// "<WorkerID>-<i>", must keep the rule for IDs. A nil handler
// (nilHandler) is refused first: Run starts nothing without one.
func WorkerDefaults(errInvalid error, nilHandler bool, lease time.Duration,
	workers *int, workerID *string, interval *time.Duration, batch *int, timeout time.Duration) error {
	switch {
	case nilHandler:
		return fmt.Errorf("%w: nil Handler", errInvalid)
	case *workers < 0 || *workers > MaxWorkers:
		return fmt.Errorf("%w: WorkerOptions.Workers is %d, must be in [0, %d] (0 = GOMAXPROCS)", errInvalid, *workers, MaxWorkers)
	case *interval < 0:
		return fmt.Errorf("%w: WorkerOptions.HeartbeatInterval is %v, must be >= 0 (0 = LeaseDuration/3)", errInvalid, *interval)
	case timeout < 0:
		return fmt.Errorf("%w: WorkerOptions.Timeout is %v, must be >= 0 (0 = no limit)", errInvalid, timeout)
	case *batch < 0 || *batch > MaxBatch:
		return fmt.Errorf("%w: WorkerOptions.Batch is %d, must be in [0, %d] (0 = %d)", errInvalid, *batch, MaxBatch, DefaultBatch)
	}
	if *workers == 0 {
		*workers = runtime.GOMAXPROCS(0)
	}
	if *workerID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		*workerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	// Worker i is "<WorkerID>-<i>"; the last one's ID is the longest.
	if p := NameProblem(fmt.Sprintf("%s-%d", *workerID, *workers-1), MaxIDBytes, "MaxIDBytes"); p != "" {
		return fmt.Errorf("%w: WorkerOptions.WorkerID %s makes worker IDs that break the rule for IDs: worker %d's ID %s",
			errInvalid, Quote(*workerID), *workers-1, p)
	}
	*batch = cmp.Or(*batch, DefaultBatch)
	*interval = HeartbeatInterval(*interval, lease)
	if *interval >= lease { // checked after defaulting: LeaseDuration/3 of 1ns is no interval
		return fmt.Errorf("%w: WorkerOptions.HeartbeatInterval %v must be < LeaseDuration %v", errInvalid, *interval, lease)
	}
	return nil
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

// CallHandler is Run's call of a handler on every backend: h(ctx, l)'s
// error, or, if h panics, the *PanicError of the panic (Panicked), so
// the attempt fails with its value and stack. Call it without any lock
// held: h is user code.
func CallHandler[L any, H ~func(context.Context, L) error](h H, ctx context.Context, l L) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Panicked(p)
		}
	}()
	return h(ctx, l)
}
