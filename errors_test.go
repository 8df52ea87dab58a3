package leaserouter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
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

// TestEndedByHolderNamesTheHolderReasons: the shared rule of a holder's own
// end (contract.EndedByHolder, by the reason's string) knows the core's
// reasons: completed, failed, released and snoozed, and no other.
func TestEndedByHolderNamesTheHolderReasons(t *testing.T) {
	for r, want := range map[leaserouter.LostReason]bool{
		leaserouter.LostCompleted: true, leaserouter.LostFailed: true, leaserouter.LostReleased: true, leaserouter.LostSnoozed: true,
		leaserouter.LostExpired: false, leaserouter.LostSuperseded: false, leaserouter.LostCanceled: false,
		leaserouter.LostRevoked: false, leaserouter.LostNilLease: false, "unknown": false,
	} {
		require.Equal(t, want, contract.EndedByHolder(string(r)), "%s", r)
	}
}
