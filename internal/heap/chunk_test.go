package heap

import (
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// counting returns a queue and a heap of items whose setIndex calls are
// counted in *calls.
func counting(calls *int) (*Queue[*item], *Heap[*item]) {
	less := func(a, b *item) bool { return a.key < b.key }
	set := func(e *item, i int) { e.idx = i; *calls++ }
	return NewQueue(less, set), New(less, set)
}

// TestGrowthKeepsPositions: growing from empty to 100,000 elements, the
// ring and the heap tell each element its position once, when it is
// pushed, and never again: growth moves no element to another position
// (a ring resized by copying tells every element its new slot, one cache
// miss each under the router's lock).
func TestGrowthKeepsPositions(t *testing.T) {
	const n = 100_000
	calls := 0
	q, h := counting(&calls)
	qs, hs := make([]*item, n), make([]*item, n)
	qpos, hpos := make([]int, n), make([]int, n)
	for i := range n {
		qs[i], hs[i] = &item{key: i}, &item{key: i}
		q.Push(qs[i])
		h.Push(hs[i]) // in order: no sifting
		qpos[i], hpos[i] = qs[i].idx, hs[i].idx
	}
	require.Equal(t, 2*n, calls, "one setIndex per push")
	for i := range n {
		require.Equal(t, qpos[i], qs[i].idx)
		require.Same(t, qs[i], q.At(qs[i].idx))
		require.Equal(t, i, hs[i].idx)
	}
	require.True(t, q.Valid(index))
	require.True(t, h.Valid(index))
	require.LessOrEqual(t, q.Cap(), n+chunkLen)
	require.LessOrEqual(t, h.Cap(), n+chunkLen)
}

// TestNoOperationMovesMoreThanAChunk: a queue and a heap grow to 300,000
// elements (the queue partly out of order, so its heap grows too) and
// drain, with removals from the middle; no Push, Pop or Remove tells more
// elements their position than a chunk's worth plus a heap path, nor
// copies more than a chunk, however many elements they hold.
func TestNoOperationMovesMoreThanAChunk(t *testing.T) {
	const n, bound = 300_000, 1024
	rng := rand.New(rand.NewPCG(7, 8))
	calls := 0
	q, h := counting(&calls)
	path := 2 * (bits.Len(uint(n)) + 1) // setIndex calls of one sift: two per level
	var live []*item
	mostCalls, mostMoved := 0, 0
	op := func(f func()) {
		c, m := calls, q.moved+q.heap.moved+h.moved
		f()
		mostCalls = max(mostCalls, calls-c)
		mostMoved = max(mostMoved, q.moved+q.heap.moved+h.moved-m)
	}
	for i := range n {
		it, hi := &item{key: i}, &item{key: rng.IntN(n)}
		if i%10 == 0 {
			it.key = i - 1000 // out of order: the queue's heap
		}
		op(func() { q.Push(it) })
		op(func() { h.Push(hi) })
		live = append(live, it)
	}
	for len(live) > 0 {
		k := rng.IntN(len(live))
		if k%4 == 0 { // a pop now and then; mostly removals from anywhere
			op(func() { q.Pop() })
			op(func() { h.Pop() })
			live = live[:len(live)-1] // which item left is checked below, not here
			continue
		}
		it := live[k]
		if it.idx == -1 { // popped already
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		op(func() { q.Remove(it.idx) })
		live[k] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	for q.Len() > 0 {
		op(func() { q.Pop() })
	}
	for h.Len() > 0 {
		op(func() { h.Pop() })
	}
	require.Positive(t, mostMoved, "chunks grew or merged")
	require.LessOrEqual(t, mostCalls, bound+path, "an operation called setIndex %d times", mostCalls)
	require.LessOrEqual(t, mostMoved, bound, "an operation moved %d elements", mostMoved)
	require.True(t, q.Valid(index))
	require.LessOrEqual(t, q.Cap(), 2*chunkLen, "memory after the drain")
	require.LessOrEqual(t, h.Cap(), chunkLen, "memory after the drain")
}

// TestQueueChunksAgainstModel runs random pushes (mostly in order), pops
// and removals from anywhere on a queue of tens of thousands of elements,
// so its ring links, unlinks, packs and merges chunks, and checks after
// every step that it holds exactly the live elements, each at its
// position, in order (Valid).
func TestQueueChunksAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	q := newQueue()
	live := map[*item]bool{}
	var all []*item
	last := 0
	check := func(step int) {
		require.Equal(t, len(live), q.Len(), "step %d", step)
		require.True(t, q.Valid(index), "step %d", step)
		for it := range live {
			require.True(t, q.Contains(it.idx), "step %d", step)
			require.Same(t, it, q.At(it.idx), "step %d", step)
		}
	}
	for step := range 300_000 {
		grow := step < 150_000
		switch r := rng.IntN(10); {
		case r < 5 && grow || r == 0 || len(all) == 0:
			key := last + rng.IntN(2)
			if rng.IntN(50) == 0 {
				key -= 1 + rng.IntN(100)
			}
			last = max(last, key)
			it := &item{key: key}
			q.Push(it)
			live[it] = true
			all = append(all, it)
		case r < 3 && len(live) > 0:
			min, ok := q.Peek()
			require.True(t, ok)
			got, _ := q.Pop()
			require.Same(t, min, got)
			require.True(t, live[got], "step %d", step)
			delete(live, got)
		default:
			k := rng.IntN(len(all))
			it := all[k]
			all[k] = all[len(all)-1]
			all = all[:len(all)-1]
			if live[it] {
				require.Same(t, it, q.Remove(it.idx))
				require.Equal(t, -1, it.idx)
				delete(live, it)
			}
		}
		if step%10_000 == 0 || len(live) < 100 {
			check(step)
		}
	}
	check(-1)
}

// TestQueueMemoryFollowsLiveElements: after 200,000 elements are pushed
// and all but 0.4% removed from everywhere in the ring (leases completed
// out of order), the ring's sparse chunks have merged: its memory is a
// small multiple of the elements left, not of the peak.
func TestQueueMemoryFollowsLiveElements(t *testing.T) {
	const n = 200_000
	rng := rand.New(rand.NewPCG(11, 12))
	q := newQueue()
	items := make([]*item, n)
	for i := range items {
		items[i] = &item{key: i}
		q.Push(items[i])
	}
	peak := q.Cap()
	rng.Shuffle(n, func(i, j int) { items[i], items[j] = items[j], items[i] })
	keep := n / 250
	for _, it := range items[keep:] {
		q.Remove(it.idx)
	}
	t.Logf("peak %d slots, %d after, for %d elements", peak, q.Cap(), q.Len())
	require.Equal(t, keep, q.Len())
	require.True(t, q.Valid(index))
	require.LessOrEqual(t, q.Cap(), 8*keep+2*chunkLen)
	for q.Len() > 0 {
		q.Pop()
	}
	require.LessOrEqual(t, q.Cap(), chunkLen)
	require.Len(t, q.byID, 1, "chunk ids start over")
}

// TestQueueUpcomingAcrossChunks: Upcoming counts slots from the front
// across chunk boundaries.
func TestQueueUpcomingAcrossChunks(t *testing.T) {
	q := newQueue()
	items := make([]*item, 3*chunkLen)
	for i := range items {
		items[i] = &item{key: i}
		q.Push(items[i])
	}
	for range 10 {
		q.Pop()
	}
	q.Remove(items[20].idx) // a hole: its slot still counts
	require.Same(t, items[10], q.Upcoming(0))
	require.Nil(t, q.Upcoming(10))
	require.Same(t, items[chunkLen+5], q.Upcoming(chunkLen-5))
	require.Same(t, items[len(items)-1], q.Upcoming(len(items)-11))
	require.Nil(t, q.Upcoming(len(items)-10))
	require.Nil(t, q.Upcoming(-1))
}
