package leaserouter

import (
	"context"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// Middleware wraps every attempt a Client runs: it is called with the
// handler's ctx and the Attempt, and calls next to run the rest of the
// chain and the handler (it may call next once, or not at all to end the
// attempt without the handler). ClientOptions.Middleware[0] is the
// outermost.
//
// A middleware runs inside the lease, on the goroutine that runs the
// handler: ctx is the handler's ctx, canceled when the lease is lost
// (cause a *LeaseLostError) or the attempt's timeout passes (a
// *TimeoutError); a ctx passed to next becomes the handler's ctx. Its
// return value is the attempt's outcome, as a handler's is: nil completes
// the job, a Snooze error snoozes it, a Permanent error makes it dead,
// and any other error fails the attempt (retried after Backoff). A panic
// in a middleware is the attempt's panic: recovered, and the attempt
// fails with a *PanicError. The same middleware runs concurrently for
// many attempts, so it must be safe for concurrent use.
//
// Tracing is a middleware: the otel module's NewTracingMiddleware starts
// a consumer span per attempt.
type Middleware func(ctx context.Context, a Attempt, next func(context.Context) error) error

// Attempt is what a Middleware knows of the attempt it wraps. It is a
// value: a middleware may keep it.
type Attempt struct {
	Kind  string // the job's kind, as registered
	Queue string // the queue the job is in
	JobID string
	// Attempt is the lease's attempt number: 1 for the job's first
	// attempt (Lease.Attempt).
	Attempt int
	Token   Token // the lease's fencing token
	// Metadata is the job's metadata (WithMetadata), nil if it has none.
	// It is shared with the job's other readers: read it, never write it.
	Metadata map[string]string
}

// chain composes mw once, outermost first (Start calls it): the result
// runs an attempt through every middleware and then inner.
func chain(mw []Middleware) func(ctx context.Context, a Attempt, inner func(context.Context) error) error {
	return contract.Chain[Middleware, Attempt](mw)
}
