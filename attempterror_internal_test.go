package leaserouter

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAppendErrorNeverRewritesAHandedOutRecord: a history handed out
// (attemptErrors, shared by Get's row until it is copied outside the
// lock) never changes through later appends, and the history is always
// the last MaxAttemptErrors records, in order, in bounded room.
func TestAppendErrorNeverRewritesAHandedOutRecord(t *testing.T) {
	var h []AttemptError
	var views, copies [][]AttemptError
	for i := 1; i <= 5*MaxAttemptErrors; i++ {
		h = appendError(h, AttemptError{Attempt: i})
		v := attemptErrors(h)
		require.Len(t, v, min(i, MaxAttemptErrors))
		require.Equal(t, i, v[len(v)-1].Attempt, "the newest last")
		require.Equal(t, max(1, i-MaxAttemptErrors+1), v[0].Attempt, "the oldest kept")
		require.LessOrEqual(t, cap(h), 2*MaxAttemptErrors+MaxAttemptErrors/2, "room bounded")
		views, copies = append(views, v), append(copies, slices.Clone(v))
	}
	for i := range views {
		require.Equal(t, copies[i], views[i], "view %d unchanged by later appends", i)
	}
	require.Nil(t, attemptErrors(nil))
}
