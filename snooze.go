package leaserouter

import (
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/usercode"
)

// Snooze: a holder ends its lease and has the job run again later,
// without spending an attempt.

// Snooze ends the lease and has the job run again after d: scheduled
// until now+d, or pending at once for d == 0 (behind the jobs ready
// before it). The attempt is not counted: the job's Attempt goes back to
// what it was before this lease, so a job may snooze any number of times
// without coming closer to dead (MaxAttempts). Its LastError and
// checkpoint are kept. The event is EventSnoozed (Stats.Snoozed); a
// later operation on the lease is refused with Reason LostSnoozed. A
// negative d returns an error wrapping ErrInvalidOptions, changing
// nothing; a lease no longer valid (including after Close) returns a
// *LeaseLostError, changing nothing. Like Heartbeat, it blocks only on
// the router's lock, accepted or refused. From a Run handler, return
// Snooze(d) instead. Snoozing as in River (JobSnooze) and Sidekiq.
func (l *Lease[T]) Snooze(d time.Duration) error {
	if err := contract.CheckSnooze(ErrInvalidOptions, d); err != nil { // the same on every backend
		return err
	}
	if v := l.view(); v != nil {
		return v.Snooze(d)
	}
	return l.end(func(r *Router[T], j *job[T], now int64) { r.snooze(j, l, now, d) })
}

// snooze ends l's lease at its holder's request (Lease.Snooze): the
// attempt is not counted, and the job is scheduled until now+d (pending
// at once for d == 0). The caller holds r.mu and has checked that l is
// valid.
func (r *Router[T]) snooze(j *job[T], l *Lease[T], now int64, d time.Duration) {
	r.endLease(j, endSnoozed)
	r.stats.Snoozed++
	setHeld(r.emit(EventSnoozed, now, j, l, l.Token, nil), l.granted, now)
	j.attempt--
	r.schedule(j, addSat(now, d), now)
}

// Snooze returns the error a Run handler returns to snooze its job: Run
// then calls Lease.Snooze(d) on the handler's lease (see there) instead
// of failing the attempt. A negative d makes Run fail the attempt with
// Lease.Snooze's error (wrapping ErrInvalidOptions). Wrapped in another
// error, it still snoozes (Run looks with errors.As). Outside a Run
// handler it is an error like any other.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: d} }

// SnoozeError is the error Snooze returns; Delay is its argument.
type SnoozeError struct{ Delay time.Duration }

// Error says that the job snoozed and for how long.
func (e *SnoozeError) Error() string { return fmt.Sprintf("leaserouter: job snoozed for %v", e.Delay) }

// SnoozeDelay reports whether err is, or wraps, an error made by Snooze,
// and its delay: what a Run handler's error asks for, on every backend.
// Code around a handler (a middleware seeing its error) calls it to tell
// a snooze from a failure. A nil err gives false, as does one whose
// Unwrap or As panics on the way (the panic is recovered). Safe for
// concurrent use.
func SnoozeDelay(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false // before s is declared: it escapes (As takes any), and Run's nil results must not pay for it
	}
	var s *SnoozeError
	if !usercode.As(err, &s) {
		return 0, false
	}
	return s.Delay, true
}
