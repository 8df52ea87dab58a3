package leaserouter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestStatsByState: every state once, in the order of the constants, with
// its count; breaking out of the loop stops the iteration.
func TestStatsByState(t *testing.T) {
	s := leaserouter.Stats{Pending: 1, Scheduled: 2, Leased: 3, Succeeded: 4, Failed: 5, Canceled: 6}
	var states []leaserouter.State
	var counts []int
	for st, n := range s.ByState() {
		states = append(states, st)
		counts = append(counts, n)
	}
	require.Equal(t, []leaserouter.State{leaserouter.StatePending, leaserouter.StateScheduled,
		leaserouter.StateLeased, leaserouter.StateSucceeded, leaserouter.StateFailed, leaserouter.StateCanceled}, states)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6}, counts)
	seen := 0
	for range s.ByState() {
		seen++
		break
	}
	require.Equal(t, 1, seen)
}
