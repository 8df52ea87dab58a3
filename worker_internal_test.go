package leaserouter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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
	// Run's per-job garbage: a Lease and its handler context, three words.
	require.EqualValues(t, 152, unsafe.Sizeof(runLease[int]{}))
}

// TestRunHandsOutEveryLeaseItAllocatesOnce: a Run worker allocates its
// leases in blocks and hands each out once, in batches of any size: the
// leases a batch asked for and was not granted are the next batch's (none
// handed out twice, so none a handler may keep is ever granted again),
// the pool never holds a block more than the batch asked for, and the
// only leases dropped are the rest of a block begun, when the worker
// waits (fewer than maxShared), so that it keeps no lease of an earlier
// batch alive while it waits.
func TestRunHandsOutEveryLeaseItAllocatesOnce(t *testing.T) {
	w := &worker[int]{}
	rng := rand.New(rand.NewPCG(33, 1))
	seen := map[*runLease[int]]bool{}
	handed, dropped, waits := 0, 0, 0
	// The test's own record of which block each lease came in (the
	// leases a take adds to the pool, block after block as w.blocks
	// lists them) and how many of each block were handed out.
	blockOf, handedOf, blocks := map[*runLease[int]]int{}, map[int]int{}, 0
	for range 2000 {
		want := 1 + rng.IntN(3*maxShared)
		before, allocated, nb := len(w.pool), w.allocated, len(w.blocks)
		w.take(want)
		if w.allocated > allocated {
			require.Less(t, len(w.pool), want+maxShared, "a block more than the batch asked for")
		} else {
			require.Equal(t, before, len(w.pool))
		}
		i := before
		for _, size := range w.blocks[nb:] {
			blocks++
			for range size {
				blockOf[w.pool[i]] = blocks
				i++
			}
		}
		require.Equal(t, len(w.pool), i, "the blocks taken are the leases added")
		require.Len(t, w.into, want)
		require.Len(t, w.ready, want)
		n := rng.IntN(want + 1) // granted: any number up to want
		into := slices.Clone(w.into[:n])
		for i, rl := range w.handOut(n) {
			require.Same(t, into[i], &rl.Lease, "the batch is what the router was given")
			require.False(t, seen[rl], "a lease handed out twice")
			seen[rl] = true
			handedOf[blockOf[rl]]++
		}
		handed += n
		if n == 0 { // the worker waits
			waits++
			k := w.dropShared()
			require.Less(t, k, maxShared)
			dropped += k
			require.False(t, w.firstUsed)
			if len(w.pool) > 0 {
				require.Zero(t, handedOf[blockOf[w.pool[0]]], "a worker about to wait keeps a block some of which it handed out")
			}
		}
		sum := 0
		for _, size := range w.blocks {
			require.Positive(t, size, "a block none of which is in the pool")
			sum += size
		}
		require.Equal(t, len(w.pool), sum, "the blocks listed are the pool")
		require.Equal(t, w.allocated, handed+dropped+len(w.pool), "a lease allocated was dropped without being handed out")
	}
	require.Positive(t, waits)
	require.Less(t, dropped, waits*maxShared)
}

// TestRunFedOneJobAtATimeAllocatesALeaseOrTwoPerJob: a Run worker whose
// jobs come one at a time, each after it went idle (a low-rate queue),
// steps as lease does: it asks for twice what it got, is granted nothing,
// drops the rest of a block begun and waits with one lease, then gets its
// job. It must allocate a lease or two per job, not a block per job.
func TestRunFedOneJobAtATimeAllocatesALeaseOrTwoPerJob(t *testing.T) {
	w := &worker[int]{size: 64}
	const jobs = 1000
	for range jobs {
		w.take(min(w.size, max(1, 2*w.got)))
		w.handOut(0) // nothing ready
		if w.dropShared() > 0 {
			w.take(1)
		}
		w.handOut(1) // the job the wait got
		w.got = 1
	}
	require.LessOrEqual(t, w.allocated, 2*jobs, "leases allocated for %d jobs fed one at a time", jobs)
}
