package leaserouter_test

// Rules the core shares with pgrouter through internal/contract, each
// tested here and, under the same name, in pgrouter/contract_test.go, so
// the two backends give one answer (the conformance suite,
// internal/routertest, takes them as rows).

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// eventBacklog is DESIGN's bound, written out: a test using the package's
// own constant would follow it if it changed.
const eventBacklog = 16384

// TestEventBacklogIs16384: with the hook stuck, producers of new work go
// on until 16384 events are undelivered (the one in the hook included),
// and wait from there.
func TestEventBacklogIs16384(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: g.hook})
		filled := make(chan error, 1)
		go func() {
			for i := range eventBacklog {
				if err := r.Enqueue(fmt.Sprint("j", i), ""); err != nil {
					filled <- err
					return
				}
			}
			filled <- nil
		}()
		synctest.Wait()
		require.NoError(t, receive(t, filled), "16384 enqueues with the hook stuck")
		over := make(chan error, 1)
		go func() { over <- r.Enqueue("over", "") }()
		synctest.Wait()
		requireBlocked(t, over)
		close(g.open)
		synctest.Wait()
		require.NoError(t, receive(t, over))
	})
}
