package leaserouter

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// TestConstantsAreTheSharedRules: the root's exported limits and defaults
// are written out (so that godoc shows their values) and are the very
// values both backends enforce through internal/contract.
func TestConstantsAreTheSharedRules(t *testing.T) {
	for _, c := range []struct {
		name         string
		root, shared int64
	}{
		{"DefaultLeaseDuration", int64(DefaultLeaseDuration), int64(contract.DefaultLeaseDuration)},
		{"DefaultMaxAttempts", DefaultMaxAttempts, contract.DefaultMaxAttempts},
		{"DefaultRetention", int64(DefaultRetention), int64(contract.DefaultRetention)},
		{"MaxBulkIDs", MaxBulkIDs, contract.MaxBulk},
		{"MaxWorkers", MaxWorkers, contract.MaxWorkers},
		{"DefaultBatch", DefaultBatch, contract.DefaultBatch},
		{"MaxBatch", MaxBatch, contract.MaxBatch},
		{"DefaultListLimit", DefaultListLimit, contract.DefaultListLimit},
		{"MaxListLimit", MaxListLimit, contract.MaxListLimit},
		{"MinHeartbeatInterval", int64(MinHeartbeatInterval), int64(contract.MinHeartbeatInterval)},
		{"MaxIDBytes", MaxIDBytes, contract.MaxIDBytes},
	} {
		require.Equal(t, c.shared, c.root, c.name)
	}
}
