package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter"
)

// KeepAlive heartbeats l every interval in a goroutine of its own, for a
// caller that holds a lease outside Run, and returns a context derived
// from ctx that is canceled, with a *leaserouter.LeaseLostError as its
// cause, as soon as a heartbeat finds the lease lost, or with an error
// wrapping ErrLeaseLost when LeaseDuration has passed on the client's
// clock since the send time of the last accepted heartbeat (the database
// unreachable). A heartbeat that fails for another reason is retried at
// the next interval. The goroutine ends when ctx is done, the returned
// cancel func is called, or the lease is lost; call cancel when done with
// the lease. interval <= 0 means LeaseDuration/3; interval >=
// LeaseDuration, or a nil or zero l, returns a context canceled at once
// with an error wrapping ErrInvalidOptions (or the nil-lease
// *LeaseLostError). A nil ctx means context.Background().
func KeepAlive[T any](ctx context.Context, l *Lease[T], interval time.Duration) (context.Context, context.CancelFunc) {
	ctx = orBackground(ctx)
	kctx, cancel := context.WithCancelCause(ctx)
	stop := func() { cancel(context.Canceled) }
	if l == nil || l.r == nil {
		cancel(&leaserouter.LeaseLostError{Reason: leaserouter.LostNilLease})
		return kctx, stop
	}
	lease := l.r.opts.LeaseDuration
	if interval <= 0 {
		interval = lease / 3
	}
	if interval >= lease {
		cancel(fmt.Errorf("%w: KeepAlive interval %v must be < LeaseDuration %v", leaserouter.ErrInvalidOptions, interval, lease))
		return kctx, stop
	}
	unproven := time.AfterFunc(time.Until(l.provenUntil()), func() { cancel(errUnproven) })
	go func() {
		defer unproven.Stop()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-t.C:
			}
			hctx, done := context.WithTimeout(kctx, lease)
			err := l.Heartbeat(hctx, nil)
			done()
			var lost *leaserouter.LeaseLostError
			switch {
			case err == nil:
				unproven.Reset(time.Until(l.provenUntil()))
			case errors.As(err, &lost):
				cancel(lost)
				return
			}
		}
	}()
	return kctx, stop
}
