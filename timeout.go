package leaserouter

import (
	"context"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// Per-attempt timeouts: the limit of a job's attempts (WithTimeout,
// WorkerOptions.Timeout), and how Run applies it to a handler's ctx.

// A job's WithTimeout is a time.Duration in its record (the record's
// size is the same as with the 2-byte index into interned durations it
// replaced, in the space the retention queue's link left), so there is
// no ceiling on distinct durations: a timeout derived from each request's
// deadline is as good as a constant one.

// limit is the timeout of an attempt of j under a Run whose
// WorkerOptions.Timeout is fallback: the job's WithTimeout if it has one. j's
// timeout is set before the job is first published and never changes
// (forget leaves it), so the worker granted its lease may read it
// without r.mu.
func (r *Router[T]) limit(j *job[T], fallback time.Duration) time.Duration {
	return contract.AttemptTimeout(j.timeout, fallback)
}

// withTimeout returns the handler's ctx for l under the limit d (none for
// d == 0): canceled d from now with a *TimeoutError as its cause, so that
// ctx.Err() is context.DeadlineExceeded and context.Cause says which job
// and limit. Derived from a context of the standard library's (parent is
// the made leaseCtx's), it costs a timer and no goroutine.
func withTimeout[T any](parent context.Context, l *Lease[T], d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(parent, d, &TimeoutError{JobID: l.JobID, Token: l.Token, Timeout: d})
}
