package delivery_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/delivery"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestRoomOpensAtHalfOnly: the wait made by a producer that found the
// backlog full ends only once the backlog is down to half, and the next
// wait is a new one.
func TestRoomOpensAtHalfOnly(t *testing.T) {
	var r delivery.Room
	require.False(t, r.Waiting())
	require.False(t, r.Progressed(0), "no waiter: nothing to open")
	require.True(t, delivery.Full(contract.EventBacklog))
	require.False(t, delivery.Full(contract.EventBacklog-1))
	ch := r.Wait()
	require.Equal(t, ch, r.Wait(), "one wait for every producer until it opens")
	require.True(t, r.Waiting())
	require.True(t, r.Progressed(contract.EventBacklog/2+1), "above half: still waiting")
	require.False(t, isClosed(ch))
	require.False(t, r.Progressed(contract.EventBacklog/2), "at half: open")
	require.True(t, isClosed(ch))
	require.False(t, r.Waiting())
	next := r.Wait()
	require.NotEqual(t, ch, next, "a wait after the opening is a new one")
	require.False(t, isClosed(next))
}
