package leaserouter

import (
	"context"
	"testing"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/stretchr/testify/require"
)

// TestHistoryBeforeTheEpoch: with a wall clock before 1970 (minutes since
// the Unix epoch negative) a transition is counted in its minute and
// History lists whole minutes, instead of indexing the ring with a
// negative remainder (a panic under the router's lock).
func TestHistoryBeforeTheEpoch(t *testing.T) {
	r, err := New[int](Options{})
	require.NoError(t, err)
	defer r.Close(context.Background())
	func() {
		r.mu.Lock()
		defer r.mu.Unlock()                                                 // a panic must not leave it held: Close would wait
		r.epochUnix = -90*int64(time.Minute) - r.now() - int64(time.Second) // now: 1969-12-31 22:29:59 UTC or so
		r.tally(contract.TallyCompleted, r.now())
	}()
	h := r.History()
	last := h[len(h)-1]
	require.Equal(t, 1, last.Completed, "counted in the current minute")
	require.Equal(t, time.Date(1969, 12, 31, 22, 29, 0, 0, time.UTC), last.Start)
	require.Equal(t, last.Start, last.Start.Truncate(time.Minute))
}

// TestHistoryCountsEachTransitionInTheMinuteOfItsInstant: tally keeps
// the slot of the minute it counted in last, with that minute's span;
// a transition at either edge of a minute, or at an earlier instant than
// the last one counted (an expiry's instant, settled late), still counts
// in its own minute.
func TestHistoryCountsEachTransitionInTheMinuteOfItsInstant(t *testing.T) {
	r, err := New[int](Options{})
	require.NoError(t, err)
	defer r.Close(context.Background())
	minute := int64(time.Minute)
	r.mu.Lock()
	edge := r.now() + minute         // minute 1000 starts here on the router's clock
	r.epochUnix = 1000*minute - edge // before any tally, as New leaves it
	for _, at := range []int64{edge - 1, edge, edge + minute - 1, edge - 1, edge + minute, edge + minute - 1, edge} {
		r.tally(contract.TallyCompleted, at)
	}
	ring := r.hist.ring
	r.mu.Unlock()
	for m, want := range map[int64]uint32{999: 2, 1000: 4, 1001: 1} {
		s := ring[histIndex(m)]
		require.Equal(t, m, s.minute)
		require.Equal(t, want, s.n[contract.TallyCompleted], "minute %d", m)
	}
}
