package leaserouter

import "fmt"

// RunNow makes a scheduled job (one waiting for its run-at: a delay,
// WithRunAt, or a retry waiting out its backoff) pending at once, as if
// its run-at had come now: it is leased by priority, then ready time
// (now), then enqueue order, and wakes one blocked Acquire (none while
// paused). Its attempt count, MaxAttempts, fencing token, LastError and
// checkpoint stay: a retry run early is the same next attempt it would
// have been at its run-at. It emits no event of its own; the lease that
// follows emits EventLeaseAcquired. It returns an error wrapping
// ErrNotScheduled for a pending, leased or finished job (naming its
// state), ErrNotFound for an unknown id (one ValidateID refuses wraps
// ErrInvalidJob too) or a finished job past its Retention, and ErrClosed
// after Close; in each case nothing changes. It settles what is due
// first, as Get does (a job whose run-at has come is pending already:
// ErrNotScheduled). It blocks only on the router's lock, O(log n) under
// it. Safe for concurrent use.
func (r *Router[T]) RunNow(id string) error {
	return r.onJob(id, func(j *job[T], now int64) error {
		if j.state != StateScheduled {
			return fmt.Errorf("%w: %q is %v", ErrNotScheduled, j.id, j.state)
		}
		r.sched.Remove(int(j.heapIndex))
		r.makeReady(j, now)
		return nil
	})
}
