package heap

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

type item struct {
	key, idx int
}

func newItems() *Heap[*item] {
	return New(func(a, b *item) bool { return a.key < b.key }, func(e *item, i int) { e.idx = i })
}

func index(e *item) int { return e.idx }

// TestHeapAgainstSort runs random pushes, pops, removals and key changes
// and checks the heap against a sorted copy after every step.
func TestHeapAgainstSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := newItems()
	var live []*item
	for step := range 5000 {
		switch op := rng.IntN(4); {
		case op == 0 || len(live) == 0:
			it := &item{key: rng.IntN(100)}
			h.Push(it)
			live = append(live, it)
		case op == 1:
			want := slices.MinFunc(live, func(a, b *item) int { return a.key - b.key }).key
			got, ok := h.Pop()
			require.True(t, ok)
			require.Equal(t, want, got.key, "step %d", step)
			require.Equal(t, -1, got.idx)
			live = slices.DeleteFunc(live, func(e *item) bool { return e == got })
		case op == 2:
			k := rng.IntN(len(live))
			it := live[k]
			require.Same(t, it, h.Remove(it.idx))
			require.Equal(t, -1, it.idx)
			live = slices.Delete(live, k, k+1)
		default:
			it := live[rng.IntN(len(live))]
			it.key = rng.IntN(100)
			h.Fix(it.idx)
		}
		require.Equal(t, len(live), h.Len())
		require.True(t, h.Valid(index), "step %d", step)
	}
}

func TestHeapEmpty(t *testing.T) {
	h := newItems()
	_, ok := h.Peek()
	require.False(t, ok)
	_, ok = h.Pop()
	require.False(t, ok)
	require.True(t, h.Valid(index))
}

func TestHeapValidCatchesDisorder(t *testing.T) {
	h := newItems()
	a, b := &item{key: 1}, &item{key: 2}
	h.Push(a)
	h.Push(b)
	a.key = 3 // changed without Fix
	require.False(t, h.Valid(index))
	h.Fix(a.idx)
	require.True(t, h.Valid(index))
	b.idx = 7 // a stale position
	require.False(t, h.Valid(index))
}
