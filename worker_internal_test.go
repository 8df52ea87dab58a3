package leaserouter

import (
	"context"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestShare: a Run worker leases at most its share of the ready jobs with
// the callers blocked in Acquire (and those woken for a job and not back
// for it yet), at least one, and no more than the room left in the event
// backlog.
func TestShare(t *testing.T) {
	r, err := New[int](Options{})
	require.NoError(t, err)
	defer r.Close(context.Background())
	specs := make([]JobSpec[int], 100)
	for i := range specs {
		specs[i].ID = fmt.Sprint(i)
	}
	_, err = r.EnqueueMany(specs)
	require.NoError(t, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	share := func(want, waiters, woken, backlog int) int {
		defer func(h bool) { r.waiters, r.woken, r.outbox, r.hooked, r.delivery = nil, 0, nil, h, nil }(r.hooked)
		r.waiters, r.woken = make([]chan struct{}, waiters), woken
		if backlog > 0 {
			r.hooked, r.delivery = true, new(handoff) // as with OnEvent set
			r.outbox = make([]record, backlog)
		}
		return r.share(want)
	}
	require.Equal(t, 64, share(64, 0, 0, 0), "nobody waits: what it asks for")
	require.Equal(t, 100, share(256, 0, 0, 0), "nobody waits: every ready job")
	require.Equal(t, 25, share(256, 3, 0, 0), "three wait: a quarter")
	require.Equal(t, 25, share(256, 1, 2, 0), "two woken and one waiting: a quarter")
	require.Equal(t, 1, share(256, 200, 0, 0), "at least one")
	require.Equal(t, 10, share(256, 0, 0, eventBacklog-10), "the room left in the event backlog")
	require.Equal(t, 1, share(256, 0, 0, eventBacklog), "at least one")
}

// TestSpecPoolKeepsNoHugeBatch: EnqueueMany's pool of parsed specs takes
// back modest ones, for the next batch, and only those, so a huge batch's
// memory is not kept after it. sync.Pool promises nothing, and under -race
// it drops a quarter of what it is given, at random; so each round asks
// the pool right after EnqueueMany, on the same goroutine (the pool's
// per-P slot it has just filled), and the test asserts over many rounds:
// some round must get a modest batch's specs back (else the pool keeps
// nothing, and the huge check below would pass without looking), and no
// round may get a huge batch's.
func TestSpecPoolKeepsNoHugeBatch(t *testing.T) {
	r, err := New[int](Options{})
	require.NoError(t, err)
	defer r.Close(context.Background())
	batch := func(n int) []JobSpec[int] {
		specs := make([]JobSpec[int], n)
		for i := range specs {
			specs[i].ID = fmt.Sprint(i) // duplicates after the first round: parsed all the same
		}
		return specs
	}
	modest, huge := batch(maxPooledSpecs/2), batch(2*maxPooledSpecs)
	const rounds = 32 // a modest batch's specs all dropped: 4^-32 under -race
	reused := 0
	for range rounds {
		_, err = r.EnqueueMany(modest)
		require.NoError(t, err)
		sp := specPool.Get().(*[]enqueueSpec)
		if cap(*sp) >= len(modest) {
			reused++
		}
		// Not put back: the next round's Get must see only what
		// EnqueueMany put since.

		_, err = r.EnqueueMany(huge)
		require.NoError(t, err)
		sp = specPool.Get().(*[]enqueueSpec)
		require.LessOrEqual(t, cap(*sp), maxPooledSpecs, "a huge batch's specs came back from the pool")
	}
	require.Positive(t, reused, "no modest batch's specs came back from the pool in %d rounds", rounds)
}

// TestRecordSizes pins the sizes of a job record and a Lease, which
// BenchmarkLifecycleFloor copies (it prices two allocations "of our
// sizes") and BenchmarkMemory's figure follows: a field added to either
// must update the floor too.
func TestRecordSizes(t *testing.T) {
	require.EqualValues(t, 160, unsafe.Sizeof(job[int]{}))
	require.EqualValues(t, 128, unsafe.Sizeof(Lease[int]{}))
}
