package leaserouter_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

func TestNewDefaults(t *testing.T) {
	require.Equal(t, 30*time.Second, leaserouter.DefaultLeaseDuration)
	require.Equal(t, 5, leaserouter.DefaultMaxAttempts)
	require.Equal(t, 10*time.Minute, leaserouter.DefaultRetention)

	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", "x"))
		j := get(t, r, "a")
		require.Equal(t, leaserouter.DefaultMaxAttempts, j.MaxAttempts)
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 0, j.Priority)

		start := time.Now()
		l := acquire(t, r, "w")
		requireTime(t, start.Add(leaserouter.DefaultLeaseDuration), l.Expiry(), "default LeaseDuration")
		require.NoError(t, l.Complete())

		// Default retention: known for 10m after it finished, not after.
		sleep(leaserouter.DefaultRetention - time.Nanosecond)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
		sleep(time.Nanosecond)
		requireGone(t, r, "a")
		require.Equal(t, uint64(1), r.Stats().Purged)
	})
}

func TestNewDefaultBackoff(t *testing.T) {
	for attempt := -1; attempt <= 64; attempt++ {
		d := leaserouter.DefaultBackoff(attempt)
		require.Greater(t, d, time.Duration(0), "attempt %d", attempt)
		require.LessOrEqual(t, d, 5*time.Minute, "attempt %d: capped at 5m", attempt)
	}
	require.LessOrEqual(t, leaserouter.DefaultBackoff(1), time.Second, "starts from 1s")
	require.Greater(t, leaserouter.DefaultBackoff(20), time.Second, "grows")

	// Options.Backoff nil uses it: the first retry comes within (0, 1s].
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		now := time.Now()
		require.NoError(t, l.Fail(errors.New("boom")))
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateScheduled, j.State)
		require.True(t, j.RunAt.After(now), "RunAt %v", j.RunAt)
		require.False(t, j.RunAt.After(now.Add(time.Second)), "RunAt %v", j.RunAt)
	})
}
