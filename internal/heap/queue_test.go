package heap

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func newQueue() *Queue[*item] {
	return NewQueue(func(a, b *item) bool { return a.key < b.key }, func(e *item, i int) { e.idx = i })
}

// TestQueueAgainstSort runs random pushes (mostly in order, some not),
// pops and removals, and checks the queue against the minimum of what it
// should hold after every step, for ring, heap and the mix of both.
func TestQueueAgainstSort(t *testing.T) {
	for _, inOrder := range []int{0, 50, 90, 100} { // percent of pushes at or above the last key
		rng := rand.New(rand.NewPCG(uint64(inOrder), 2))
		q := newQueue()
		var live []*item
		last, ring, heap := 0, 0, 0
		for step := range 20000 {
			switch op := rng.IntN(5); {
			case op <= 1 || len(live) == 0:
				key := last + rng.IntN(3)
				if rng.IntN(100) >= inOrder {
					key = last - 1 - rng.IntN(10)
				}
				last = max(last, key)
				it := &item{key: key}
				q.Push(it)
				if it.idx < -1 {
					ring++
				} else {
					heap++
				}
				live = append(live, it)
			case op == 2:
				want := slices.MinFunc(live, func(a, b *item) int { return a.key - b.key }).key
				p, ok := q.Peek()
				require.True(t, ok)
				got, ok := q.Pop()
				require.True(t, ok)
				require.Same(t, p, got)
				require.Equal(t, want, got.key, "step %d", step)
				require.Equal(t, -1, got.idx)
				live = slices.DeleteFunc(live, func(e *item) bool { return e == got })
			default:
				k := rng.IntN(len(live))
				it := live[k]
				require.True(t, q.Contains(it.idx))
				require.Same(t, it, q.At(it.idx))
				require.Same(t, it, q.Remove(it.idx))
				require.Equal(t, -1, it.idx)
				live = slices.Delete(live, k, k+1)
			}
			require.Equal(t, len(live), q.Len())
			require.True(t, q.Valid(index), "step %d", step)
		}
		switch inOrder {
		case 100:
			require.Zero(t, heap, "in-order keys all go to the ring")
		case 0:
			require.NotZero(t, heap)
		default:
			require.NotZero(t, ring)
			require.NotZero(t, heap)
		}
	}
}

func TestQueueEmptyAndDrain(t *testing.T) {
	q := newQueue()
	_, ok := q.Peek()
	require.False(t, ok)
	_, ok = q.Pop()
	require.False(t, ok)
	items := make([]*item, 100)
	for i := range items {
		items[i] = &item{key: i}
		q.Push(items[i])
	}
	for i := 0; i < 100; i += 2 {
		q.Remove(items[i].idx) // leave holes the ring must skip
	}
	for i := 1; i < 100; i += 2 {
		got, ok := q.Pop()
		require.True(t, ok)
		require.Equal(t, i, got.key)
	}
	_, ok = q.Peek()
	require.False(t, ok)
	require.Zero(t, q.Len())
	require.False(t, q.Contains(-2))
	require.True(t, q.Valid(index))
}

func TestQueueValidCatchesDisorder(t *testing.T) {
	q := newQueue()
	a, b := &item{key: 1}, &item{key: 2}
	q.Push(a)
	q.Push(b)
	require.True(t, q.Valid(index))
	a.key = 3 // now out of order in the ring
	require.False(t, q.Valid(index))
	a.key = 1
	b.idx = 7 // a stale position
	require.False(t, q.Valid(index))
}

// TestQueueContainsNoPosition: -1 ("in no index") is never a position,
// even when the ring's last slot is in use (Audit relies on it).
func TestQueueContainsNoPosition(t *testing.T) {
	q := newQueue()
	for i := range 16 {
		q.Push(&item{key: i})
	}
	require.True(t, q.Contains(-2-15))
	require.False(t, q.Contains(-1))
	require.False(t, q.Contains(-2-16))
	require.False(t, q.Contains(0), "the heap is empty")
}

// TestQueueAndHeapShrinkAfterBurst: after a burst drains, the ring and the
// heap give their memory back; at a steady size they do not resize.
func TestQueueAndHeapShrinkAfterBurst(t *testing.T) {
	q := newQueue()
	for i := range 100_000 {
		q.Push(&item{key: i})
		if i%10 == 0 {
			q.Push(&item{key: -i}) // out of order: into the heap
		}
	}
	require.Greater(t, q.Cap(), 100_000)
	for q.Len() > 5 {
		q.Pop()
	}
	require.LessOrEqual(t, q.Cap(), 2*chunkLen, "5 elements left")
	require.True(t, q.Valid(func(e *item) int { return e.idx }))

	size := q.Cap()
	for i := range 1000 {
		q.Push(&item{key: 1_000_000 + i})
		q.Pop()
		require.Equal(t, size, q.Cap(), "step %d resized", i)
	}
}

// TestSmallestInOrder: Smallest yields a queue's k smallest in order,
// whether they sit in the ring or in the heap, and changes nothing.
func TestSmallestInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 50 {
		q := NewQueue(func(a, b *int) bool { return *a < *b }, func(*int, int) {})
		var all []int
		n := rng.IntN(3000)
		for i := range n {
			v := i * 2 // mostly in order: the ring
			if rng.IntN(4) == 0 {
				v = rng.IntN(2 * n) // out of order: the heap
			}
			q.Push(&v)
			all = append(all, v)
		}
		slices.Sort(all)
		k := rng.IntN(n + 2)
		var got []int
		q.Smallest(k, func(e *int) bool { got = append(got, *e); return true })
		want := all[:min(k, len(all))]
		require.Equal(t, want, got, "round %d: %d of %d", round, k, n)
		require.Equal(t, n, q.Len(), "unchanged")
	}
}

// TestSmallestAfterPagesInOrder: following pages of SmallestAfter, each
// after the last element of the one before, yields every element once,
// in order, whether it is in the ring (removals leave holes) or the heap.
func TestSmallestAfterPagesInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 50 {
		q := NewQueue(func(a, b *[2]int) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }, func(*[2]int, int) {})
		var all [][2]int
		n := rng.IntN(5000)
		for i := range n {
			v := [2]int{i * 2, i} // mostly in order: the ring
			if rng.IntN(4) == 0 {
				v[0] = rng.IntN(2 * n) // out of order: the heap
			}
			if rng.IntN(3) == 0 {
				v[0] = max(0, i*2-1) // a tie broken by the second key
			}
			q.Push(&v)
			all = append(all, v)
		}
		slices.SortFunc(all, func(a, b [2]int) int {
			if a[0] != b[0] {
				return a[0] - b[0]
			}
			return a[1] - b[1]
		})
		k := 1 + rng.IntN(300)
		var got [][2]int
		var last *[2]int
		for page := 0; ; page++ {
			require.LessOrEqual(t, page, n/k+1, "round %d: pages never end", round)
			var before func(*[2]int) bool
			if last != nil {
				l := *last
				before = func(e *[2]int) bool { return e[0] < l[0] || e[0] == l[0] && e[1] <= l[1] }
			}
			m := 0
			q.SmallestAfter(before, k, func(e *[2]int) bool { got = append(got, *e); last = e; m++; return true })
			if m < k {
				break
			}
		}
		if len(all) == 0 {
			all = nil
		}
		require.Equal(t, all, got, "round %d: %d elements, pages of %d", round, n, k)
	}
}
