// Package heap is an index-addressable binary min-heap, and a priority
// queue built on it for keys that mostly arrive in order (Queue).
//
// Unlike container/heap it is generic and tells every element its position
// (through the setIndex callback), so an element can be removed or re-ordered
// in O(log n) by index: the router needs that to move a job between states
// (a lease extended by a heartbeat, a job canceled while scheduled).
//
// Both keep their elements in chunks of at most chunkLen, so that growing
// and shrinking costs a bounded step at any size: a full heap or ring gains
// one chunk, never a copy of everything, and no element's position changes
// because the storage grew (no setIndex sweep, one cache miss per element,
// under the router's lock). See Heap and Queue for the details.
package heap

// chunkLen is the number of elements in a full chunk (8 KiB of pointers):
// the bound on the elements a growth or shrink step moves.
const (
	chunkBits = 10
	chunkLen  = 1 << chunkBits
	chunkMask = chunkLen - 1
)

// minChunk is the length of a heap's or ring's first chunk; it doubles up
// to chunkLen before a second chunk is added, so a small one stays small.
const minChunk = 16

// Heap is a binary min-heap ordered by less. The zero value is not usable;
// make one with New. A Heap is not safe for concurrent use: the router guards
// it with its own lock.
//
// Position i is in chunk i/chunkLen. Only the first chunk may be shorter
// than chunkLen (while it is the only one; it doubles when full). Growing
// adds a chunk; a last chunk left empty is dropped once the one before it
// is half empty too, so a load that swings across a chunk boundary does
// not allocate each time.
type Heap[E any] struct {
	chunks   [][]E
	n        int
	moved    int // elements copied by growth since New (for tests)
	less     func(a, b E) bool
	setIndex func(e E, i int)
}

// New returns an empty heap ordered by less. setIndex is called with an
// element's new position every time it moves, and with -1 when it leaves.
func New[E any](less func(a, b E) bool, setIndex func(e E, i int)) *Heap[E] {
	return &Heap[E]{less: less, setIndex: setIndex}
}

// Len returns the number of elements.
func (h *Heap[E]) Len() int { return h.n }

// at returns the place of position i (0 <= i < Len).
func (h *Heap[E]) at(i int) *E { return &h.chunks[i>>chunkBits][i&chunkMask] }

// Peek returns the least element; ok is false when the heap is empty.
func (h *Heap[E]) Peek() (e E, ok bool) {
	if h.n == 0 {
		return e, false
	}
	return h.chunks[0][0], true
}

// At returns the element at position i (0 <= i < Len), for audits.
func (h *Heap[E]) At(i int) E { return *h.at(i) }

// Push adds e in O(log n); growth copies at most chunkLen/2 elements.
func (h *Heap[E]) Push(e E) {
	i := h.n
	if k := i >> chunkBits; k == len(h.chunks) || i&chunkMask == len(h.chunks[k]) {
		h.grow()
	}
	*h.at(i) = e
	h.n++
	h.setIndex(e, i)
	h.up(i)
}

// grow makes room for position h.n: the first chunk doubles while it is
// short, else a chunk is added.
func (h *Heap[E]) grow() {
	if h.n>>chunkBits < len(h.chunks) { // the first chunk is full and short
		c := make([]E, 2*len(h.chunks[0]))
		h.moved += copy(c, h.chunks[0])
		h.chunks[0] = c
		return
	}
	size := chunkLen
	if len(h.chunks) == 0 {
		size = minChunk
	}
	h.chunks = append(h.chunks, make([]E, size))
}

// Pop removes and returns the least element in O(log n); ok is false when
// the heap is empty.
func (h *Heap[E]) Pop() (e E, ok bool) {
	if h.n == 0 {
		return e, false
	}
	return h.Remove(0), true
}

// Remove removes and returns the element at position i in O(log n).
func (h *Heap[E]) Remove(i int) E {
	n := h.n - 1
	e := *h.at(i)
	if i != n {
		h.swap(i, n)
	}
	var zero E
	*h.at(n) = zero // drop the reference so the element can be collected
	h.n = n
	if k := len(h.chunks) - 1; k > 0 && n <= k<<chunkBits-chunkLen/2 {
		h.shrink()
	}
	if i != n && !h.down(i) {
		h.up(i)
	}
	h.setIndex(e, -1)
	return e
}

// shrink drops the last chunk, empty while the one before it is at most
// half full, so memory follows the elements after a burst; the directory
// of chunks is reallocated once it is mostly unused.
func (h *Heap[E]) shrink() {
	k := len(h.chunks) - 1
	h.chunks[k] = nil
	h.chunks = h.chunks[:k]
	if c := cap(h.chunks); c > 64 && k <= c/4 {
		h.chunks = append([][]E(nil), h.chunks...)
	}
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
	for i := range h.n {
		e := *h.at(i)
		if index(e) != i {
			return false
		}
		if i > 0 && h.less(e, *h.at((i - 1) / 2)) {
			return false
		}
	}
	return true
}

// Moved returns the number of elements copied by growth since New, for
// tests and benchmarks of the work growth costs.
func (h *Heap[E]) Moved() int { return h.moved }

// Cap returns the capacity of the heap's memory, for tests of memory use.
func (h *Heap[E]) Cap() int {
	if len(h.chunks) == 0 {
		return 0
	}
	return len(h.chunks[0]) + (len(h.chunks)-1)*chunkLen
}

func (h *Heap[E]) swap(i, j int) {
	a, b := h.at(i), h.at(j)
	*a, *b = *b, *a
	h.setIndex(*a, i)
	h.setIndex(*b, j)
}

func (h *Heap[E]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(*h.at(j), *h.at(i)) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts the element at i0 down and reports whether it moved.
func (h *Heap[E]) down(i0 int) bool {
	n := h.n
	i := i0
	for {
		j := 2*i + 1
		if j >= n || j < 0 {
			break
		}
		if r := j + 1; r < n && h.less(*h.at(r), *h.at(j)) {
			j = r
		}
		if !h.less(*h.at(j), *h.at(i)) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
