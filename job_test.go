package leaserouter_test

import (
	"context"
	"strings"
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
		{leaserouter.StateFailed, "failed", true},
		{leaserouter.StateCanceled, "canceled", true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.name, tt.s.String())
		require.Equal(t, tt.terminal, tt.s.Terminal(), tt.name)
	}
	require.Equal(t, leaserouter.State(0), leaserouter.StatePending, "zero State is pending")
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

// TestReadEnqueueOptions: options read as Enqueue applies them (the later
// of WithDelay and WithRunAt wins), and the same bad input refused.
func TestReadEnqueueOptions(t *testing.T) {
	at := time.Unix(1e9, 0)
	s, err := leaserouter.ReadEnqueueOptions("a", nil)
	require.NoError(t, err)
	require.Equal(t, leaserouter.EnqueueSettings{}, s)
	s, err = leaserouter.ReadEnqueueOptions("a", []leaserouter.EnqueueOption{
		leaserouter.WithPriority(-3), leaserouter.WithRunAt(at), leaserouter.WithDelay(time.Second), leaserouter.WithMaxAttempts(7),
	})
	require.NoError(t, err)
	require.Equal(t, leaserouter.EnqueueSettings{Priority: -3, MaxAttempts: 7, Delay: time.Second}, s)
	s, err = leaserouter.ReadEnqueueOptions("a", []leaserouter.EnqueueOption{leaserouter.WithDelay(time.Second), leaserouter.WithRunAt(at)})
	require.NoError(t, err)
	require.Equal(t, leaserouter.EnqueueSettings{RunAt: at}, s)
	for _, bad := range []struct {
		id   string
		opts []leaserouter.EnqueueOption
	}{
		{"", nil},
		{"a", []leaserouter.EnqueueOption{leaserouter.WithDelay(-1)}},
		{"a", []leaserouter.EnqueueOption{leaserouter.WithMaxAttempts(0)}},
	} {
		_, err := leaserouter.ReadEnqueueOptions(bad.id, bad.opts)
		require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	}
}

// TestValidateIDEveryByte: the rule for IDs at each single byte, so the
// fast path for ASCII (one comparison per byte) is checked at its edges:
// 0x01-0x7f pass, NUL and every byte 0x80-0xff (alone, never valid UTF-8)
// are refused with the problem named; a long ASCII ID and a multi-byte
// rune take the slow path and pass, as does the longest ID.
func TestValidateIDEveryByte(t *testing.T) {
	for b := range 256 {
		id := "id" + string([]byte{byte(b)}) + "x"
		err, werr := leaserouter.ValidateID(id), leaserouter.ValidateWorkerID(id)
		switch {
		case b == 0:
			require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
			require.ErrorContains(t, err, "holds NUL at byte 2")
			require.ErrorIs(t, werr, leaserouter.ErrInvalidOptions)
			require.ErrorContains(t, werr, "holds NUL at byte 2")
		case b >= 0x80:
			require.ErrorIs(t, err, leaserouter.ErrInvalidJob, "byte %#x", b)
			require.ErrorContains(t, err, "not valid UTF-8 at byte 2", "byte %#x", b)
			require.ErrorIs(t, werr, leaserouter.ErrInvalidOptions, "byte %#x", b)
		default:
			require.NoError(t, err, "byte %#x", b)
			require.NoError(t, werr, "byte %#x", b)
		}
	}
	for _, id := range []string{"é", "ключ-42", "🚀", strings.Repeat("a", leaserouter.MaxIDBytes), strings.Repeat("é", leaserouter.MaxIDBytes/2)} {
		require.NoError(t, leaserouter.ValidateID(id), "%.40q", id)
		require.NoError(t, leaserouter.ValidateWorkerID(id), "%.40q", id)
	}
	require.ErrorContains(t, leaserouter.ValidateID(strings.Repeat("a", leaserouter.MaxIDBytes+1)), "above MaxIDBytes")
	require.ErrorContains(t, leaserouter.ValidateID(""), "empty ID")
	require.NoError(t, leaserouter.ValidateWorkerID(""))
}
