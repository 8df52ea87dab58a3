package leaserouter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestLostReasonValues: the reasons keep their string values, so code
// that compared LeaseLostError.Reason with strings still works, and the
// constants can be switched on.
func TestLostReasonValues(t *testing.T) {
	for want, r := range map[string]leaserouter.LostReason{
		"expired": leaserouter.LostExpired, "superseded": leaserouter.LostSuperseded,
		"released": leaserouter.LostReleased, "failed": leaserouter.LostFailed,
		"completed": leaserouter.LostCompleted, "canceled": leaserouter.LostCanceled,
		"revoked": leaserouter.LostRevoked, "nil lease": leaserouter.LostNilLease,
	} {
		require.Equal(t, want, string(r))
	}
	var l *leaserouter.Lease[string]
	var lle *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(), &lle)
	require.True(t, lle.Reason == "nil lease", "comparable with an untyped string")
	switch lle.Reason {
	case leaserouter.LostNilLease:
	default:
		t.Fatalf("reason %q", lle.Reason)
	}
}
