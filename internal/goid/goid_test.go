package goid

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCurrentDiffersBetweenGoroutines(t *testing.T) {
	here := Current()
	require.NotZero(t, here)
	require.Equal(t, here, Current(), "stable within a goroutine")
	other := make(chan uint64)
	go func() { other <- Current() }()
	id := <-other
	require.NotZero(t, id)
	require.NotEqual(t, here, id)
}
