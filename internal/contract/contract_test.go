package contract

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNextBatch: one after a cut batch whatever it took; doubling (capped)
// after a quick one, halving (floored at one) after a slow one.
func TestNextBatch(t *testing.T) {
	const h = time.Second
	require.Equal(t, 1, NextBatch(8, 256, true, time.Millisecond, h), "cut, however quick")
	require.Equal(t, 1, NextBatch(8, 256, true, 2*h, h), "cut and slow")
	require.Equal(t, 16, NextBatch(8, 256, false, h/4, h))
	require.Equal(t, 256, NextBatch(200, 256, false, 0, h))
	require.Equal(t, 4, NextBatch(8, 256, false, h/2+1, h))
	require.Equal(t, 1, NextBatch(1, 256, false, h, h))
	require.Equal(t, 8, NextBatch(8, 256, false, h/2, h), "in between: unchanged")
}

// TestHeartbeatInterval: lease/3 by default, a floor of 1ms or lease/4.
func TestHeartbeatInterval(t *testing.T) {
	require.Equal(t, 10*time.Second, HeartbeatInterval(0, 30*time.Second))
	require.Equal(t, 10*time.Second, HeartbeatInterval(-1, 30*time.Second))
	require.Equal(t, time.Millisecond, HeartbeatInterval(time.Nanosecond, 30*time.Second))
	require.Equal(t, 500*time.Microsecond, HeartbeatInterval(time.Nanosecond, 2*time.Millisecond))
	require.Equal(t, time.Duration(1), HeartbeatInterval(0, 2))
}

// TestBackoffRecovered: a panicking backoff gives the fallback's delay and
// an error saying so.
func TestBackoffRecovered(t *testing.T) {
	d, err := Backoff(func(int) time.Duration { panic("boom") }, func(a int) time.Duration { return time.Duration(a) }, 3)
	require.Equal(t, time.Duration(3), d)
	require.EqualError(t, err, "leaserouter: Backoff(3) panicked: boom; used DefaultBackoff")
	d, err = Backoff(func(int) time.Duration { return time.Hour }, nil, 1)
	require.Equal(t, time.Hour, d)
	require.NoError(t, err)
}

// TestRouterDefaults: each shared field's bound, the backend floor, and
// the defaults of zero fields.
func TestRouterDefaults(t *testing.T) {
	bad := errors.New("bad")
	check := func(lease, minLease time.Duration, attempts int, floor uint64) error {
		_, err := RouterDefaults(bad, RouterOptions{LeaseDuration: lease, MaxAttempts: attempts, TokenFloor: floor}, minLease)
		return err
	}
	o, err := RouterDefaults(bad, RouterOptions{}, 0)
	require.NoError(t, err)
	require.Equal(t, DefaultLeaseDuration, o.LeaseDuration)
	require.Equal(t, DefaultMaxAttempts, o.MaxAttempts)
	require.Equal(t, DefaultRetention, o.Retention)
	require.NotNil(t, o.Backoff)
	require.NoError(t, check(time.Nanosecond, 0, 1, 1<<63-2))
	require.ErrorIs(t, check(-1, 0, 0, 0), bad)
	require.ErrorContains(t, check(time.Microsecond, time.Millisecond, 0, 0), "must be >= 1ms on this backend")
	require.ErrorContains(t, check(0, 0, -1, 0), "MaxAttempts is -1")
	require.ErrorContains(t, check(0, 0, 1<<31, 0), "MaxAttempts is 2147483648")
	require.ErrorContains(t, check(0, 0, 0, 1<<63-1), "TokenFloor")
}

// TestPanicError: "panic: <value>", a blank line, the stack.
func TestPanicError(t *testing.T) {
	var err error
	func() {
		defer func() { err = Panicked(recover()) }()
		panic("boom")
	}()
	require.True(t, strings.HasPrefix(err.Error(), "panic: boom\n\ngoroutine "), err.Error())
}

// panicHandler is a slog.Handler whose Handle panics.
type panicHandler struct{}

func (panicHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (panicHandler) Handle(context.Context, slog.Record) error { panic("handler") }
func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h panicHandler) WithGroup(string) slog.Handler           { return h }

// TestReportLoggerPanics: a Logger whose handler panics is reported as
// one more panic, and Report itself never panics.
func TestReportLoggerPanics(t *testing.T) {
	l := slog.New(panicHandler{})
	require.NotPanics(t, func() { require.True(t, Report(l, "msg", "j")) })
	require.False(t, ReportTo(l, "msg", "j"))
}

// TestAfterHandler: nil completes, stopping or not; an error releases
// when stopping, fails the attempt with itself otherwise; a snooze is
// kept even when stopping, and a negative one fails the attempt with
// Lease.Snooze's error.
func TestAfterHandler(t *testing.T) {
	bad := errors.New("invalid")
	x := errors.New("x")
	outcome := func(err error, stopping bool, d time.Duration, snoozed bool) Outcome {
		o, _ := AfterHandler(bad, err, stopping, d, snoozed)
		return o
	}
	require.Equal(t, Complete, outcome(nil, false, 0, false))
	require.Equal(t, Complete, outcome(nil, true, 0, false))
	require.Equal(t, Release, outcome(x, true, 0, false))
	o, err := AfterHandler(bad, x, false, 0, false)
	require.Equal(t, Fail, o)
	require.Same(t, x, err)
	snooze := errors.New("snoozed")
	require.Equal(t, Snooze, outcome(snooze, true, 0, true), "snoozed while stopping")
	require.Equal(t, Snooze, outcome(snooze, false, time.Second, true))
	for _, stopping := range []bool{false, true} {
		o, err := AfterHandler(bad, snooze, stopping, -1, true)
		require.Equal(t, Fail, o, "a negative snooze, stopping %v", stopping)
		require.ErrorIs(t, err, bad)
		require.Equal(t, CheckSnooze(bad, -1).Error(), err.Error())
	}
}

// TestStopping: a Run stops starting jobs when its ctx is done or Close
// has begun, and only then.
func TestStopping(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	require.False(t, Stopping(ctx, false))
	cancel()
	require.True(t, Stopping(ctx, false))
	require.True(t, Stopping(t.Context(), true))
}

// TestCallHandlerRecoversAPanic: a handler's error is returned as is; its
// panic becomes the PanicError of its value, with the stack of the panic.
func TestCallHandlerRecoversAPanic(t *testing.T) {
	x := errors.New("x")
	h := func(_ context.Context, n int) error {
		if n == 0 {
			panic("boom")
		}
		return x
	}
	require.Same(t, x, CallHandler(h, t.Context(), 1))
	err := CallHandler(h, t.Context(), 0)
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom", pe.Value)
	require.Contains(t, string(pe.Stack), "TestCallHandlerRecoversAPanic")
}

// TestFailCauseOfNilIsUnknownError: Fail(nil) says "unknown error"; a
// Permanent cause is found wrapped; a typed nil cause's text says its
// Error panicked, and it still fails the attempt.
func TestFailCauseOfNilIsUnknownError(t *testing.T) {
	text, cause, permanent := FailCause(nil)
	require.Equal(t, "unknown error", text)
	require.ErrorIs(t, cause, ErrUnknown)
	require.False(t, permanent)
	_, _, permanent = FailCause(fmt.Errorf("job 7: %w", Permanent(errors.New("bad"))))
	require.True(t, permanent)
	var typedNil *PanicError
	text, cause, permanent = FailCause(typedNil)
	require.Contains(t, text, "panic")
	require.NotPanics(t, func() { _ = cause.Error() })
	require.False(t, permanent)
}

// TestAttemptTimeoutPrefersTheJobs: a job's own limit wins over the
// Run's; without one, the Run's applies (0: none).
func TestAttemptTimeoutPrefersTheJobs(t *testing.T) {
	require.Equal(t, time.Second, AttemptTimeout(time.Second, time.Minute))
	require.Equal(t, time.Minute, AttemptTimeout(0, time.Minute))
	require.Zero(t, AttemptTimeout(0, 0))
}
