package contract

import (
	"errors"
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter/internal/usercode"
)

// How a lease ends, on every backend: Fail's cause (its text, a
// permanent failure), a recovered Backoff, a snooze's delay, and which
// ends are the holder's own.

// ErrUnknown is the cause of Fail(nil): its text, "unknown error", is the
// job's LastError.
var ErrUnknown = errors.New("unknown error")

// AttemptsExhausted is the LastError of a job that became dead with none
// of its own (its last lease released, or handed back by Close), and the
// text of its EventDead's Err.
const AttemptsExhausted = "attempts exhausted"

// FailCause reads the cause given to Lease.Fail, as Fail does on every
// backend: text is its message, "unknown error" for nil (ErrUnknown),
// cut to MaxErrorBytes (TruncateError);
// safe is cause with an Error method that cannot panic (cause itself, or
// a wrapper whose text says it panicked: a typed nil error fails the
// attempt all the same); permanent says cause is, or wraps, an error made
// by Permanent (no Backoff, the job is dead at once). cause's Error,
// Unwrap and As are user code, recovered here: call it with no lock held.
func FailCause(cause error) (text string, safe error, permanent bool) {
	if cause == nil {
		cause = ErrUnknown
	}
	text, safe = usercode.Error(cause)
	return TruncateError(text), safe, IsPermanent(safe)
}

// Permanent is leaserouter.Permanent: err marked as not worth retrying,
// with err's message, and errors.Is/As seeing err through it; nil for a
// nil err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent is leaserouter.IsPermanent: whether err is, or wraps, an
// error made by Permanent. A nil err is not permanent, nor is one whose
// Unwrap or As method panics on the way (the panic is recovered).
func IsPermanent(err error) bool {
	var perm *permanentError
	return usercode.As(err, &perm)
}

type permanentError struct{ err error }

// Error is the wrapped error's message.
func (e *permanentError) Error() string { return e.err.Error() }

// Unwrap returns the error given to Permanent.
func (e *permanentError) Unwrap() error { return e.err }

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

// CheckSnooze is the error of Lease.Snooze for a negative delay d (nil
// for d >= 0), which a Run handler's Snooze(d) also fails its attempt
// with.
func CheckSnooze(errInvalid error, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: Snooze(%v), must be >= 0", errInvalid, d)
	}
	return nil
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
