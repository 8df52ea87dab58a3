package leaserouter_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestStatsByState: every state once, in the order of the constants, with
// its count; breaking out of the loop stops the iteration.
func TestStatsByState(t *testing.T) {
	s := leaserouter.Stats{Pending: 1, Scheduled: 2, Leased: 3, Succeeded: 4, DeadJobs: 5, Canceled: 6}
	var states []leaserouter.State
	var counts []int
	for st, n := range s.ByState() {
		states = append(states, st)
		counts = append(counts, n)
	}
	require.Equal(t, []leaserouter.State{leaserouter.StatePending, leaserouter.StateScheduled,
		leaserouter.StateLeased, leaserouter.StateSucceeded, leaserouter.StateDead, leaserouter.StateCanceled}, states)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6}, counts)
	seen := 0
	for range s.ByState() {
		seen++
		break
	}
	require.Equal(t, 1, seen)
}

// TestStatsByStateReadsDeprecatedFailed: a Stats that sets only the
// deprecated Failed (code written before DeadJobs) still yields its dead
// jobs under StateDead; DeadJobs wins when both are set.
func TestStatsByStateReadsDeprecatedFailed(t *testing.T) {
	dead := func(s leaserouter.Stats) int {
		for st, n := range s.ByState() {
			if st == leaserouter.StateDead {
				return n
			}
		}
		return -1
	}
	require.Equal(t, 5, dead(leaserouter.Stats{Failed: 5}))
	require.Equal(t, 3, dead(leaserouter.Stats{DeadJobs: 3, Failed: 3}))
	require.Equal(t, 3, dead(leaserouter.Stats{DeadJobs: 3}))
}

func TestStatsHeartbeatsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NoError(t, l.Heartbeat(nil))
		require.NoError(t, l.Heartbeat(nil))
		sleep(ld)
		require.ErrorIs(t, l.Heartbeat(nil), leaserouter.ErrLeaseLost)
		require.ErrorIs(t, l.Complete(), leaserouter.ErrLeaseLost)
		st := r.Stats()
		require.Equal(t, uint64(2), st.Heartbeats)
		require.Equal(t, uint64(1), st.HeartbeatsRefused)
		require.Equal(t, uint64(2), st.StaleRejections, "a refused heartbeat is a stale rejection too")
	})
}
