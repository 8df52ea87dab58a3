package leaserouter

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// Options of a Router, their defaults, and their validation in New.

// Defaults applied by New to zero Options fields.
const (
	DefaultLeaseDuration = 30 * time.Second
	DefaultMaxAttempts   = 5
	DefaultRetention     = 10 * time.Minute
)

// DefaultBackoff is the Backoff used when Options.Backoff is nil:
// exponential from 1s (attempt 1) doubling per attempt, capped at 5m, with
// "equal jitter" (a random duration in [d/2, d)) so that jobs failing
// together do not retry together (Brooker, "Exponential Backoff And
// Jitter", AWS Architecture Blog, 2015). attempt < 1 is treated as 1.
func DefaultBackoff(attempt int) time.Duration { return contract.DefaultBackoff(attempt) }

// Options configure a Router. The zero value is valid: every zero field
// gets its default.
type Options struct {
	// LeaseDuration is how long a lease lasts without a heartbeat: the
	// visibility timeout of SQS and other queues, after which a job its
	// worker neither finished nor extended goes to another. Default
	// DefaultLeaseDuration (30s); negative is invalid. Choose it above the
	// worst pause a healthy worker can have between heartbeats (GC, slow
	// calls), not from the average job length.
	LeaseDuration time.Duration
	// MaxAttempts is how many attempts (leases granted, less those Run
	// hands back unstarted) a job may have before it is dead (StateDead). Default DefaultMaxAttempts (5); negative or above
	// math.MaxInt32 is invalid.
	// WithMaxAttempts overrides it per job.
	MaxAttempts int
	// Backoff gives the delay before retrying a job after Lease.Fail on
	// the given attempt (1 for the first). Default DefaultBackoff. A
	// result <= 0 retries at once. Fail calls it before taking the
	// router's lock, never under it, so it may call the Router; a slow one
	// slows that Fail only. A panic in it is recovered, counted in
	// Stats.CallbackPanics and reported (see OnEvent), and the attempt
	// uses DefaultBackoff instead.
	Backoff func(attempt int) time.Duration
	// Retention is how long finished jobs stay for Get and dedup. Zero
	// means DefaultRetention (10m); negative means finished jobs are
	// dropped at once.
	Retention time.Duration
	// Capacity is the most unfinished (pending, scheduled, leased) jobs
	// the Router holds; beyond it Enqueue returns ErrFull. Zero means
	// unlimited; negative is invalid.
	Capacity int
	// TokenFloor: every token issued is greater than it. Pass the last
	// token persisted by a previous run if the wall clock may step back
	// between runs. It must be below math.MaxInt64.
	TokenFloor Token
	// OnEvent, if set, receives every event, in the order the transitions
	// happened, from the Router's own delivery goroutine: never under the
	// router's lock and never on the goroutine that made the transition,
	// so what it costs delays events, not the calls that cause them. Calls
	// are serial. It may call back into the Router. A sparse stream of
	// events is delivered at once; a dense one (64 or more events a round)
	// in rounds about a millisecond apart, so that callers need not wake
	// the delivery goroutine for each: an event then waits up to about a
	// millisecond, plus the hooks' own time.
	//
	// Up to 16384 events wait for delivery. An Enqueue, TryAcquire or
	// Acquire that finds 16384 waiting waits until delivery has brought
	// the backlog down to half; one that finds fewer goes on, even while
	// an earlier one still waits. So a hook slower than the event rate
	// slows the producers of new work (and bounds the memory events hold:
	// beyond 16384, only the leases already granted add events, one per
	// heartbeat and a few when each ends); lease operations (Heartbeat, Complete,
	// Fail, Release, KeepAlive's and Run's heartbeats) and Cancel never
	// wait, accepted or refused, so a worker never loses a lease because
	// hooks are slow, nor because one of its other leases is stale. A
	// refused operation makes its stale_rejected event as always, except
	// that while the backlog is full, a lease refused before adds none (the
	// refusals coalesce into its earlier stale_rejected; Stats counts each),
	// so a stale holder retrying in a loop adds one event, not one per try.
	// Calls
	// made from OnEvent itself never wait for room; a goroutine OnEvent
	// waits for must not call Enqueue, TryAcquire or Acquire (with the
	// backlog full, it would wait for OnEvent).
	//
	// A panic in OnEvent (or a runtime.Goexit, as t.FailNow does) is
	// recovered, counted in Stats.CallbackPanics and reported at level
	// Error through Logger (slog.Default() if Logger is nil); delivery goes
	// on with the next event. OnEvent should not call
	// Close; if it does, that Close does not wait for the delivery it is
	// part of. Close returns once every event has been delivered (or its
	// ctx is done).
	OnEvent func(Event)
	// Logger, if set, gets one record per event (message: the event kind;
	// keys: event, job_id, token, attempt, worker_id, err), written by the
	// delivery goroutine after OnEvent's call for the same event, with the
	// same ordering and backlog as OnEvent. A panic in its handler is
	// recovered, counted in Stats.CallbackPanics and reported to
	// slog.Default(). Nil discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	// The fields every backend has: one check, one set of defaults.
	c, err := contract.RouterDefaults(ErrInvalidOptions, contract.RouterOptions{LeaseDuration: o.LeaseDuration,
		MaxAttempts: o.MaxAttempts, Backoff: o.Backoff, Retention: o.Retention, TokenFloor: uint64(o.TokenFloor)}, 0)
	if err != nil {
		return o, err
	}
	if o.Capacity < 0 {
		return o, fmt.Errorf("%w: Capacity is %d, must be >= 0 (0 = unlimited)", ErrInvalidOptions, o.Capacity)
	}
	o.LeaseDuration, o.MaxAttempts, o.Backoff, o.Retention = c.LeaseDuration, c.MaxAttempts, c.Backoff, c.Retention
	return o, nil
}
