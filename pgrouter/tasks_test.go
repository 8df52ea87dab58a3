package pgrouter_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestWithGraceEndsGraceAfterItsCtx: a last round trip's ctx outlives
// its caller's by the grace exactly: not done while the caller's ctx
// lives, nor at grace-1ns after its end; done at grace.
func TestWithGraceEndsGraceAfterItsCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 40 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		g, stop := pgrouter.WithGrace(ctx, grace)
		defer stop()
		time.Sleep(time.Hour)
		synctest.Wait()
		require.NoError(t, g.Err(), "the caller's ctx lives")
		cancel()
		time.Sleep(grace - time.Nanosecond)
		synctest.Wait()
		require.NoError(t, g.Err(), "at grace-1ns after the caller's ctx ended")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.ErrorIs(t, g.Err(), context.Canceled, "at grace after the caller's ctx ended")
	})
}

// TestWithGraceOfADoneCtxCountsFromNow: a ctx done already gets its
// grace from the call.
func TestWithGraceOfADoneCtxCountsFromNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 40 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		time.Sleep(time.Hour)
		g, stop := pgrouter.WithGrace(ctx, grace)
		defer stop()
		time.Sleep(grace - time.Nanosecond)
		synctest.Wait()
		require.NoError(t, g.Err())
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		require.Error(t, g.Err())
	})
}

// TestWithGraceAddsNothingToAGrace: a ctx that is a grace itself (a
// stopping Run's, a background task's) gets none more: a round trip on
// it ends with it, so Close's end of the background work takes effect
// at once.
func TestWithGraceAddsNothingToAGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		g, stop := pgrouter.WithGrace(pgrouter.Graced(ctx), time.Hour)
		defer stop()
		cancel()
		synctest.Wait()
		require.Error(t, g.Err(), "no grace after a grace")
	})
}

// TestWithGraceStopEndsIt: stop ends the grace's ctx at once, its
// caller's ctx living or not, and lets go of its timer.
func TestWithGraceStopEndsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, stop := pgrouter.WithGrace(context.Background(), time.Hour)
		stop()
		require.Error(t, g.Err())
	})
}
