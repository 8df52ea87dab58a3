package routertest_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/routertest"
)

// TestSuiteCatchesLeaseShorterThanLeaseDuration: a backend whose leases
// last half of LeaseDuration grants a job again while the contract says
// its holder's lease is still valid (two valid leases, by the contract's
// clock). With the capabilities PostgreSQL declares (no ExactClock), some
// row or the linearizability check must catch it.
//
// Without the row "one valid lease/a lease lasts LeaseDuration, its job
// not leased again before" it fails: every other row the honest fake
// passes also passes on the broken one, and the history is Ok, because the
// model lets any lease expire before any operation (time is not modeled)
// and no other row without ExactClock checks how long a lease lasts.
func TestSuiteCatchesLeaseShorterThanLeaseDuration(t *testing.T) {
	var caught, ran []string
	for _, row := range routertest.Rows() {
		if strings.Contains(row.Name, "recovers panics") || strings.HasPrefix(row.Name, "bad input/") {
			continue // the fake's Run recovers no panic and checks no option: the row would not end
		}
		if failed, log := runRow(t, "", row.Name); failed || strings.Contains(log, "not applicable") {
			continue // the fake does not do what the row checks
		}
		ran = append(ran, row.Name)
		if failed, _ := runRow(t, bugHalfLease, row.Name); failed {
			caught = append(caught, row.Name)
		}
	}
	t.Logf("rows the honest fake passes: %q", ran)
	t.Logf("rows that caught the half lease: %q", caught)

	h := fakeHarness{bug: bugHalfLease}
	seed := uint64(time.Now().UnixNano())
	var ops []porcupine.Operation
	synctest.Test(t, func(t *testing.T) {
		rec := record(t.Context(), "workload", func(rt routertest.T) { ops = routertest.Workload(rt, h, routertest.LinConfig{}, seed).Ops() })
		require.False(t, rec.Failed(), "the workload ran: %s", strings.Join(rec.logs, "\n"))
	})
	res := routertest.Check(t, ops, porcupine.Illegal, time.Minute)
	t.Logf("history of the half-lease fake: %v", res)
	require.True(t, len(caught) > 0 || res == porcupine.Illegal,
		"a backend whose leases last half of LeaseDuration passes every row it can run and the linearizability check (seed %d)", seed)
}
