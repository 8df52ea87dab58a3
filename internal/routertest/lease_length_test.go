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
// clock). With the capabilities PostgreSQL declares (no ExactClock), a
// row and the linearizability check must each catch it.
//
// Both must: before the row "one valid lease/a lease lasts LeaseDuration,
// its job not leased again before" no row without ExactClock checked how
// long a lease lasts, and before the model knew a lease's contract expiry
// (History.validUntil) it let any lease expire before any operation, so
// the broken fake passed every row it runs and its history was Ok.
func TestSuiteCatchesLeaseShorterThanLeaseDuration(t *testing.T) {
	var caught, ran []string
	for _, row := range routertest.Rows() {
		if strings.Contains(row.Name, "recovers panics") || strings.Contains(row.Name, "handler's panic") || strings.HasPrefix(row.Name, "bad input/") {
			continue // the fake's Run recovers no panic and checks no option: the row would not end
		}
		if strings.HasPrefix(row.Name, "periodic/") {
			continue // the fake's periodic jobs have no lease to shorten, and a schedule too dense for it never ends
		}
		if strings.HasPrefix(row.Name, "timeouts/") {
			continue // the fake's Run has no timeout: a handler waiting for its timeout would wait for ever
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
	require.NotEmpty(t, caught, "a backend whose leases last half of LeaseDuration passes every row it can run")
	require.Equal(t, porcupine.Illegal, res, "a backend whose leases last half of LeaseDuration passes the linearizability check (seed %d)", seed)
}
