package leaserouter_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

func TestExpiryMakesJobPendingAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("a", ""))
		t0 := time.Now()
		l := acquire(t, r, "w1")

		sleep(ld)
		// The reaper made the expiry visible without any call into the Router.
		e := rec.last(t, "a")
		require.Equal(t, leaserouter.EventLeaseExpired, e.Kind)
		requireTime(t, t0.Add(ld), e.Time, "lease_expired Time is the expiry instant")
		require.Equal(t, "w1", e.WorkerID, "the former owner")
		require.Equal(t, l.Token, e.Token)
		require.Equal(t, 1, e.Attempt)

		j := get(t, r, "a")
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Empty(t, j.Owner)
		require.NotEmpty(t, j.LastError, "an expiry is a failure")
		st := r.Stats()
		require.Equal(t, uint64(1), st.Expirations)
		require.Equal(t, 1, st.Pending)
		require.Equal(t, 0, st.Leased)

		l2 := acquire(t, r, "w2")
		require.Equal(t, 2, l2.Attempt)
	})
}

func TestWithMaxAttemptsOverrides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{MaxAttempts: 1, Backoff: noBackoff})
		require.NoError(t, r.Enqueue("three", "", leaserouter.WithMaxAttempts(3)))
		require.Equal(t, 3, get(t, r, "three").MaxAttempts)
		for attempt := 1; attempt <= 3; attempt++ {
			l := acquire(t, r, "w")
			require.Equal(t, attempt, l.Attempt)
			require.NoError(t, l.Fail(errors.New("boom")))
		}
		require.Equal(t, leaserouter.StateDead, get(t, r, "three").State)

		r2 := setup(t, leaserouter.Options{MaxAttempts: 5, Backoff: noBackoff})
		require.NoError(t, r2.Enqueue("one", "", leaserouter.WithMaxAttempts(1)))
		require.NoError(t, acquire(t, r2, "w").Fail(errors.New("boom")))
		require.Equal(t, leaserouter.StateDead, get(t, r2, "one").State)
	})
}
