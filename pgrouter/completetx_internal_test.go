package pgrouter

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFullXidAcrossEpochs: a subtransaction's 32-bit ID is qualified with
// the epoch of its top-level transaction, or the next one when the
// counter wrapped between the two.
func TestFullXidAcrossEpochs(t *testing.T) {
	require.Equal(t, uint64(5<<32|150), fullXid(5<<32|100, 150))
	require.Equal(t, uint64(5<<32|100), fullXid(5<<32|100, 100))
	require.Equal(t, uint64(6<<32|3), fullXid(5<<32|0xFFFFFFF0, 3))
}
