package heap

// Queue is a min-priority queue for keys that mostly arrive in order, as
// the keys of a job queue do (each new job's ready time and sequence number
// are the largest yet). An element not less than the last one in order is
// appended to a ring, O(1) and sequential in memory; any other goes to a
// Heap. Pop takes the lesser of the ring's front and the heap's top, so for
// in-order keys Push and Pop are O(1) and touch one element each, where a
// plain heap of n pointers would follow O(log n) of them, one cache miss
// each, on every Pop.
//
// Positions given to setIndex: >= 0 in the heap, <= -2 in the ring (slot s
// is -2-s), -1 when an element leaves. Ring positions change only when the
// ring is resized (it grows when full and shrinks when mostly empty). E must be a type whose zero value is never pushed (the ring
// marks a removed slot with it), such as a non-nil pointer.
type Queue[E comparable] struct {
	ring     []E // power-of-two length; live slots hold elements in order
	head     int // slot of the front (a live element unless n == 0)
	n        int // slots in use from head, removed ones included
	live     int // elements in the ring
	heap     Heap[E]
	less     func(a, b E) bool
	setIndex func(e E, i int)
}

// NewQueue returns an empty Queue ordered by less, calling setIndex as
// Heap does (with the positions above).
func NewQueue[E comparable](less func(a, b E) bool, setIndex func(e E, i int)) *Queue[E] {
	return &Queue[E]{less: less, setIndex: setIndex, heap: Heap[E]{less: less, setIndex: setIndex}}
}

// Len returns the number of elements.
func (q *Queue[E]) Len() int { return q.live + q.heap.Len() }

func ringPos(slot int) int { return -2 - slot }

// Push adds e: O(1) when e is not less than the last element in the ring
// (amortised, as the ring doubles when full), O(log n) otherwise.
func (q *Queue[E]) Push(e E) {
	if q.live > 0 && q.less(e, q.ring[(q.head+q.n-1)&(len(q.ring)-1)]) {
		q.heap.Push(e)
		return
	}
	if q.live == 0 {
		q.head, q.n = 0, 0
	}
	if q.n == len(q.ring) {
		q.grow()
	}
	s := (q.head + q.n) & (len(q.ring) - 1)
	q.ring[s] = e
	q.n++
	q.live++
	q.setIndex(e, ringPos(s))
}

// grow packs the ring's live elements from slot 0 into a new ring, twice
// as long unless removals left it at most half full. A ring shrinks to a
// quarter once at most an eighth of it is live (see Remove), so after a
// resize either way it is at most half full: a steady load never resizes
// back and forth.
func (q *Queue[E]) grow() {
	size := max(len(q.ring), 16)
	if q.live > len(q.ring)/2 {
		size = 2 * len(q.ring)
	}
	q.resize(size)
}

// resize packs the ring's live elements from slot 0 into a new ring of
// size slots (a power of two, more than q.live).
func (q *Queue[E]) resize(size int) {
	ring := make([]E, size)
	k := 0
	for i := range q.n {
		e := q.ring[(q.head+i)&(len(q.ring)-1)]
		var zero E
		if e == zero {
			continue
		}
		ring[k] = e
		q.setIndex(e, ringPos(k))
		k++
	}
	q.ring, q.head, q.n = ring, 0, k
}

// Peek returns the least element; ok is false when the queue is empty.
func (q *Queue[E]) Peek() (e E, ok bool) {
	h, hok := q.heap.Peek()
	if q.live == 0 {
		return h, hok
	}
	f := q.ring[q.head]
	if hok && q.less(h, f) {
		return h, true
	}
	return f, true
}

// Pop removes and returns the least element; ok is false when the queue is
// empty.
func (q *Queue[E]) Pop() (e E, ok bool) {
	h, hok := q.heap.Peek()
	if q.live == 0 || hok && q.less(h, q.ring[q.head]) {
		return q.heap.Pop()
	}
	return q.Remove(ringPos(q.head)), true
}

// At returns the element at position i, for audits.
func (q *Queue[E]) At(i int) E {
	if i >= 0 {
		return q.heap.At(i)
	}
	return q.ring[-2-i]
}

// Contains reports whether position i is one an element can have now.
func (q *Queue[E]) Contains(i int) bool {
	switch {
	case i >= 0:
		return i < q.heap.Len()
	case i == -1:
		return false // "in no index"
	}
	s := -2 - i
	return s < len(q.ring) && (s-q.head)&(len(q.ring)-1) < q.n
}

// Remove removes and returns the element at position i: O(1) in the ring,
// O(log n) in the heap.
func (q *Queue[E]) Remove(i int) E {
	if i >= 0 {
		return q.heap.Remove(i)
	}
	var zero E
	mask := len(q.ring) - 1
	s := -2 - i
	e := q.ring[s]
	q.ring[s] = zero
	q.live--
	q.setIndex(e, -1)
	// Keep the front and the back on live elements, so Push and Peek read
	// one slot; a removed slot in the middle waits until they reach it.
	for q.n > 0 && q.ring[q.head] == zero {
		q.head = (q.head + 1) & mask
		q.n--
	}
	for q.n > 0 && q.ring[(q.head+q.n-1)&mask] == zero {
		q.n--
	}
	if len(q.ring) > minCap && q.live <= len(q.ring)/8 {
		q.resize(len(q.ring) / 4) // memory follows the elements after a burst
	}
	return e
}

// Cap returns the capacity of the queue's memory (ring and heap), for
// tests of memory use.
func (q *Queue[E]) Cap() int { return len(q.ring) + q.heap.Cap() }

// Valid reports whether the ring is in order, the heap is valid, and every
// element knows its own position (checked with index), for audits.
func (q *Queue[E]) Valid(index func(E) int) bool {
	var zero, prev E
	live := 0
	for i := range q.n {
		s := (q.head + i) & (len(q.ring) - 1)
		e := q.ring[s]
		if e == zero {
			continue
		}
		if index(e) != ringPos(s) || prev != zero && q.less(e, prev) {
			return false
		}
		prev = e
		live++
	}
	return live == q.live && q.heap.Valid(index)
}

// Upcoming returns the element i places behind the ring's front (0 is the
// front), or the zero E if that slot is removed or past the ring's end, so
// a caller can read elements about to be popped before popping them.
// Elements in the heap part are not seen.
func (q *Queue[E]) Upcoming(i int) E {
	var zero E
	if i < 0 || i >= q.n {
		return zero
	}
	return q.ring[(q.head+i)&(len(q.ring)-1)]
}
