package leaserouter_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

func TestStateStringAndTerminal(t *testing.T) {
	tests := []struct {
		s        leaserouter.State
		name     string
		terminal bool
	}{
		{leaserouter.StatePending, "pending", false},
		{leaserouter.StateScheduled, "scheduled", false},
		{leaserouter.StateLeased, "leased", false},
		{leaserouter.StateSucceeded, "succeeded", true},
		{leaserouter.StateDead, "dead", true},
		{leaserouter.StateCanceled, "canceled", true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.name, tt.s.String())
		require.Equal(t, tt.terminal, tt.s.Terminal(), tt.name)
	}
	require.Equal(t, leaserouter.State(0), leaserouter.StatePending, "zero State is pending")
}

// TestStateFailedIsStateDead: the deprecated name is the same constant,
// so code written against it keeps compiling and comparing equal.
func TestStateFailedIsStateDead(t *testing.T) {
	require.Equal(t, leaserouter.StateDead, leaserouter.StateFailed)
	require.Equal(t, "dead", leaserouter.StateFailed.String())
}

// TestParseStateReadsEveryNameAndFailedAsDead: every state's String reads
// back as itself, "failed" (the dead state's former name) reads as
// StateDead, and any other name is an error wrapping ErrInvalidOptions
// that names it.
func TestParseStateReadsEveryNameAndFailedAsDead(t *testing.T) {
	for s := leaserouter.StatePending; s <= leaserouter.StateCanceled; s++ {
		got, err := leaserouter.ParseState(s.String())
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	for _, name := range []string{"dead", "failed"} {
		got, err := leaserouter.ParseState(name)
		require.NoError(t, err, name)
		require.Equal(t, leaserouter.StateDead, got, name)
	}
	for _, name := range []string{"", "Dead", "FAILED", " dead", "State(6)", "done"} {
		_, err := leaserouter.ParseState(name)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "%q", name)
		require.ErrorContains(t, err, fmt.Sprintf("%q", name))
	}
}

func TestOrderReleasedJobReadyAtTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		la := acquire(t, r, "w")
		sleep(time.Second)
		require.NoError(t, r.Enqueue("b", ""))
		sleep(time.Second)
		require.NoError(t, la.Release()) // a is ready at t0+2s, after b (t0+1s)
		require.Equal(t, "b", acquire(t, r, "w").JobID)
		l := acquire(t, r, "w")
		require.Equal(t, "a", l.JobID)
		require.Equal(t, 2, l.Attempt)
	})
}

func TestEnqueueDelayAndRunAtLastWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		t0 := time.Now()
		require.NoError(t, r.Enqueue("delay-last", "",
			leaserouter.WithRunAt(t0.Add(time.Hour)), leaserouter.WithDelay(10*time.Second)))
		require.NoError(t, r.Enqueue("runat-last", "",
			leaserouter.WithDelay(10*time.Second), leaserouter.WithRunAt(t0.Add(time.Hour))))
		require.NoError(t, r.Enqueue("zero-runat-last", "",
			leaserouter.WithDelay(10*time.Second), leaserouter.WithRunAt(time.Time{})))
		require.NoError(t, r.Enqueue("zero-delay-last", "",
			leaserouter.WithRunAt(t0.Add(time.Hour)), leaserouter.WithDelay(0)))

		j := get(t, r, "delay-last")
		require.Equal(t, leaserouter.StateScheduled, j.State)
		requireTime(t, t0.Add(10*time.Second), j.RunAt, "")
		j = get(t, r, "runat-last")
		require.Equal(t, leaserouter.StateScheduled, j.State)
		requireTime(t, t0.Add(time.Hour), j.RunAt, "")
		require.Equal(t, leaserouter.StatePending, get(t, r, "zero-runat-last").State)
		require.Equal(t, leaserouter.StatePending, get(t, r, "zero-delay-last").State)
		require.Equal(t, 2, r.Stats().Scheduled)
		require.Equal(t, 2, r.Stats().Pending)
	})
}

func TestEnqueueRunAtInThePastReadyAtEnqueueTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		t0 := time.Now()
		require.NoError(t, r.Enqueue("first", ""))
		sleep(5 * time.Second)
		require.NoError(t, r.Enqueue("past", "", leaserouter.WithRunAt(t0.Add(-time.Hour))))
		require.Equal(t, leaserouter.StatePending, get(t, r, "past").State)
		// Its ready time is its enqueue time (t0+5s), not its run-at.
		require.Equal(t, "first", acquire(t, r, "w").JobID)
		require.Equal(t, "past", acquire(t, r, "w").JobID)
	})
}

func TestPayloadOfReferenceTypeIsShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := leaserouter.New[*[]int](leaserouter.Options{})
		require.NoError(t, err)
		defer func() {
			require.NoError(t, r.Close(context.Background()))
			require.NoError(t, r.Audit())
		}()
		p := &[]int{1}
		require.NoError(t, r.Enqueue("a", p))
		j, ok := r.Get("a")
		require.True(t, ok)
		require.Same(t, p, j.Payload)
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.Same(t, p, l.Payload)
		require.NoError(t, l.Complete())
	})
}
