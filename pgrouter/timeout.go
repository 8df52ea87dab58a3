package pgrouter

import (
	"context"
	"math"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Per-attempt timeouts: the limit of a job's attempts (WithTimeout,
// WorkerOptions.Timeout), how Run applies it to a handler's ctx, and the
// conversions to and from the database's microseconds (timeout_us).

// ceilMicros is d in microseconds (the database's unit), rounded up, so
// that a positive duration stays positive (a timeout of 0 means none).
func ceilMicros(d time.Duration) int64 {
	us := d.Microseconds()
	if time.Duration(us)*time.Microsecond < d {
		us++
	}
	return us
}

// microsDuration is us microseconds (a timeout_us column) as a Duration,
// saturated at the largest one: ceilMicros rounds a WithTimeout near
// math.MaxInt64 up past what a Duration holds.
func microsDuration(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// limit is the timeout of l's attempt in Run: the job's WithTimeout if
// set, else opts.Timeout; 0 for none.
func (u *runner[T]) limit(l *Lease[T]) time.Duration {
	return contract.AttemptTimeout(l.timeout, u.opts.Timeout)
}

// timed derives the ctx of l's handler from lctx (the lease's ctx,
// canceled when the lease is lost), canceled after l's timeout (see
// limit), from now, with a *leaserouter.TimeoutError as its cause. The
// lease's ctx is left alone: the heartbeat rounds keep the lease until
// the handler returns. The caller calls stop once the handler returned.
func (u *runner[T]) timed(lctx context.Context, l *Lease[T]) (hctx context.Context, stop context.CancelFunc) {
	d := u.limit(l)
	if d <= 0 {
		return lctx, func() {}
	}
	return context.WithTimeoutCause(lctx, d, &leaserouter.TimeoutError{JobID: l.JobID, Token: l.Token, Timeout: d})
}
