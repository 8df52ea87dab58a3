package pgrouter_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestBadInput: every call given nil, zero, negative, empty or
// unencodable input, or called after Close, returns the documented error,
// never panics and changes nothing.
func TestBadInput(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()

	require.Error(t, pgrouter.Migrate(ctx, nil))
	_, err := pgrouter.New[int](ctx, nil, pgrouter.Options{})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	for _, o := range []pgrouter.Options{
		{LeaseDuration: -1}, {LeaseDuration: time.Microsecond}, {MaxAttempts: -1}, {MaxAttempts: math.MaxInt32 + 1},
		{PollInterval: -1}, {TokenFloor: math.MaxInt64},
	} {
		_, err := pgrouter.New[int](ctx, db, o)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "%+v", o)
	}

	//lint:ignore SA1012 a nil ctx is documented to mean context.Background()
	r, err := pgrouter.New[any](nil, db, pgrouter.Options{})
	require.NoError(t, err)
	require.ErrorIs(t, r.Enqueue(ctx, "", 1), leaserouter.ErrInvalidJob)
	require.ErrorIs(t, r.Enqueue(ctx, "a", 1, leaserouter.WithDelay(-time.Second)), leaserouter.ErrInvalidJob)
	require.ErrorIs(t, r.Enqueue(ctx, "a", 1, leaserouter.WithMaxAttempts(0)), leaserouter.ErrInvalidJob)
	require.ErrorIs(t, r.Enqueue(ctx, "a", make(chan int)), leaserouter.ErrInvalidJob)
	require.ErrorIs(t, r.EnqueueTx(ctx, nil, "a", 1), leaserouter.ErrInvalidOptions)
	dups, err := r.EnqueueMany(ctx, nil)
	require.NoError(t, err)
	require.Nil(t, dups)
	_, err = r.EnqueueMany(ctx, []leaserouter.JobSpec[any]{{ID: "ok"}, {ID: ""}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, "batch index 1")
	_, ok, err := r.Get(ctx, "ok")
	require.NoError(t, err)
	require.False(t, ok, "an invalid batch enqueues nothing")

	for _, max := range []int{0, -1} {
		_, err = r.TryAcquireMany(ctx, "w", max)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		_, err = r.AcquireMany(ctx, "w", max)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	}
	//lint:ignore SA1012 a nil ctx is documented to mean context.Background()
	_, err = r.TryAcquire(nil, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)

	var nilLease *pgrouter.Lease[any]
	for _, l := range []*pgrouter.Lease[any]{nilLease, {}} {
		var lost *leaserouter.LeaseLostError
		require.ErrorAs(t, l.Heartbeat(ctx, nil), &lost)
		require.Equal(t, leaserouter.LostNilLease, lost.Reason)
		require.ErrorAs(t, l.Complete(ctx), &lost)
		require.ErrorAs(t, l.Fail(ctx, nil), &lost)
		require.ErrorAs(t, l.Release(ctx), &lost)
		require.ErrorIs(t, l.CompleteTx(ctx, nil), leaserouter.ErrInvalidOptions)
		require.True(t, l.Expiry().IsZero())
		kctx, cancel := pgrouter.KeepAlive(ctx, l, 0)
		require.Error(t, kctx.Err())
		require.ErrorAs(t, context.Cause(kctx), &lost)
		cancel()
	}

	_, ok, err = r.Get(ctx, "")
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, r.Cancel(ctx, ""), leaserouter.ErrInvalidJob)
	require.ErrorIs(t, r.Cancel(ctx, ""), leaserouter.ErrNotFound)

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, pgrouter.Fence(ctx, tx, "", 1), leaserouter.ErrInvalidOptions)
	require.ErrorIs(t, pgrouter.Fence(ctx, tx, "k", math.MaxUint64), leaserouter.ErrInvalidOptions)
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, r.Enqueue(ctx, "a", 1))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	kctx, cancel := pgrouter.KeepAlive(ctx, l, leaserouter.DefaultLeaseDuration)
	require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrInvalidOptions, "interval >= LeaseDuration")
	cancel()

	// After Close: new work is refused, reads still answer, the revoked
	// lease is refused.
	done, stop := context.WithCancel(ctx)
	stop()
	require.ErrorIs(t, r.Close(done), context.Canceled)
	require.ErrorIs(t, r.Enqueue(ctx, "b", 1), leaserouter.ErrClosed)
	_, err = r.EnqueueMany(ctx, []leaserouter.JobSpec[any]{{ID: "b"}})
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	_, err = r.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	_, err = r.Acquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	require.ErrorIs(t, r.Cancel(ctx, "a"), leaserouter.ErrClosed)
	require.ErrorIs(t, r.Run(ctx, leaserouter.WorkerOptions{}, func(context.Context, *pgrouter.Lease[any]) error { return nil }), leaserouter.ErrClosed)
	_, ok, err = r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	_, err = r.Stats(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, l.Complete(ctx), leaserouter.ErrLeaseLost)
	require.NoError(t, r.Close(ctx), "a second Close")
}
