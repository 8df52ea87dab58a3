package leaserouter_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestSnoozeDelayOfNilAllocatesNothing: Run asks SnoozeDelay about every
// handler's result, nil for almost every job; asking about nil must not
// allocate (its target escapes when declared before the nil check).
func TestSnoozeDelayOfNilAllocatesNothing(t *testing.T) {
	require.Zero(t, testing.AllocsPerRun(100, func() {
		if _, ok := leaserouter.SnoozeDelay(nil); ok {
			t.Fatal("nil is no snooze")
		}
	}))
}

// panickyUnwrap is an error whose Unwrap panics.
type panickyUnwrap struct{}

func (panickyUnwrap) Error() string { return "panicky" }
func (panickyUnwrap) Unwrap() error { panic("unwrap") }

// TestSnoozeDelay: Snooze's error is found as it is and wrapped, with its
// delay (a negative one too: Run refuses it); other errors, and one whose
// Unwrap panics, are no snooze.
func TestSnoozeDelay(t *testing.T) {
	d, ok := leaserouter.SnoozeDelay(leaserouter.Snooze(time.Second))
	require.True(t, ok)
	require.Equal(t, time.Second, d)
	d, ok = leaserouter.SnoozeDelay(fmt.Errorf("later: %w", leaserouter.Snooze(-time.Second)))
	require.True(t, ok)
	require.Equal(t, -time.Second, d)
	_, ok = leaserouter.SnoozeDelay(errors.New("boom"))
	require.False(t, ok)
	_, ok = leaserouter.SnoozeDelay(panickyUnwrap{})
	require.False(t, ok)
	require.Equal(t, "leaserouter: job snoozed for 1s", leaserouter.Snooze(time.Second).Error())
}
