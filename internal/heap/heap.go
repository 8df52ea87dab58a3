// Package heap is an index-addressable binary min-heap.
//
// Unlike container/heap it is generic and tells every element its position
// (through the setIndex callback), so an element can be removed or re-ordered
// in O(log n) by index: the router needs that to move a job between states
// (a lease extended by a heartbeat, a job canceled while scheduled).
package heap

// Heap is a binary min-heap ordered by less. The zero value is not usable;
// make one with New. A Heap is not safe for concurrent use: the router guards
// it with its own lock.
type Heap[E any] struct {
	items    []E
	less     func(a, b E) bool
	setIndex func(e E, i int)
}

// New returns an empty heap ordered by less. setIndex is called with an
// element's new position every time it moves, and with -1 when it leaves.
func New[E any](less func(a, b E) bool, setIndex func(e E, i int)) *Heap[E] {
	return &Heap[E]{less: less, setIndex: setIndex}
}

// Len returns the number of elements.
func (h *Heap[E]) Len() int { return len(h.items) }

// Peek returns the least element; ok is false when the heap is empty.
func (h *Heap[E]) Peek() (e E, ok bool) {
	if len(h.items) == 0 {
		return e, false
	}
	return h.items[0], true
}

// At returns the element at position i (0 <= i < Len), for audits.
func (h *Heap[E]) At(i int) E { return h.items[i] }

// Push adds e in O(log n).
func (h *Heap[E]) Push(e E) {
	h.items = append(h.items, e)
	i := len(h.items) - 1
	h.setIndex(e, i)
	h.up(i)
}

// Pop removes and returns the least element in O(log n); ok is false when
// the heap is empty.
func (h *Heap[E]) Pop() (e E, ok bool) {
	if len(h.items) == 0 {
		return e, false
	}
	return h.Remove(0), true
}

// Remove removes and returns the element at position i in O(log n).
func (h *Heap[E]) Remove(i int) E {
	n := len(h.items) - 1
	e := h.items[i]
	if i != n {
		h.swap(i, n)
	}
	var zero E
	h.items[n] = zero // drop the reference so the element can be collected
	h.items = h.items[:n]
	h.items = shrink(h.items)
	if i != n && !h.down(i) {
		h.up(i)
	}
	h.setIndex(e, -1)
	return e
}

// Fix restores the order after the element at position i changed its key.
func (h *Heap[E]) Fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// Valid reports whether every parent is not greater than its children and
// every element knows its own position (checked with index), for audits.
func (h *Heap[E]) Valid(index func(E) int) bool {
	for i, e := range h.items {
		if index(e) != i {
			return false
		}
		if i > 0 && h.less(e, h.items[(i-1)/2]) {
			return false
		}
	}
	return true
}

// Cap returns the capacity of the heap's memory, for tests of memory use.
func (h *Heap[E]) Cap() int { return cap(h.items) }

// minCap is the capacity below which a slice is never shrunk (8 KiB of
// pointers): memory that matters comes back after a burst, while a load
// that swings between empty and a few hundred elements (Run's batches of
// leases) keeps its memory instead of reallocating it on every swing.
const minCap = 1024

// shrink returns s in half its capacity once it is at most a quarter full,
// so memory follows the elements after a burst; append doubles it again,
// and the gap between a quarter and full is the hysteresis that keeps a
// steady load from reallocating.
func shrink[E any](s []E) []E {
	if c := cap(s); c > minCap && len(s) <= c/4 {
		t := make([]E, len(s), c/2)
		copy(t, s)
		return t
	}
	return s
}

func (h *Heap[E]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.setIndex(h.items[i], i)
	h.setIndex(h.items[j], j)
}

func (h *Heap[E]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts the element at i0 down and reports whether it moved.
func (h *Heap[E]) down(i0 int) bool {
	n := len(h.items)
	i := i0
	for {
		j := 2*i + 1
		if j >= n || j < 0 {
			break
		}
		if r := j + 1; r < n && h.less(h.items[r], h.items[j]) {
			j = r
		}
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
