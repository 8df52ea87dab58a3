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
// The ring is a deque of chunks of at most chunkLen slots, linked in
// order. Each chunk has an id, and an element's position says which chunk
// and slot it is in, so the ring grows by linking a chunk at its back
// (no copy, no position rewritten) and gives memory back by unlinking a
// chunk once its last element leaves. While the ring has a single chunk,
// that chunk doubles from minChunk up to chunkLen, keeping its slots (and
// so its elements' positions), or, when at most half of it is live, packs
// its elements to its front. Removing elements from the middle (leases
// completed out of order) leaves holes; a chunk that falls below an eighth
// full merges with a neighbour when the two fill at most half a chunk, so
// memory follows the live elements; a ring back to one chunk after
// spanning many renumbers it, so the index of chunks shrinks too. Every
// such step moves at most chunkLen elements. The caller can allocate the
// next chunk before taking its lock (NewChunk, WantsChunk, Give).
//
// Positions given to setIndex: >= 0 in the heap, <= -2 in the ring (slot
// s of chunk id is -2-(id*chunkLen+s)), -1 when an element leaves. A ring
// position changes only when its chunk packs, merges or is renumbered. E must be a type
// whose zero value is never pushed (the ring marks a removed slot with
// it), such as a non-nil pointer. The ring holds fewer than 2^31 elements.
type Queue[E comparable] struct {
	head, tail *Chunk[E]   // the ring's first and last chunk; nil until the first Push
	byID       []*Chunk[E] // linked chunks by id; nil for a free id
	freeIDs    []int
	spares     [2]*Chunk[E] // empty full-size chunks kept for the next, while the ring has several
	live       int          // elements in the ring
	moved      int          // elements moved by packs and merges since New (for tests)
	heap       Heap[E]
	less       func(a, b E) bool
	setIndex   func(e E, i int)
}

// A Chunk of the ring. Its live slots are in [lo, hi): those two ends
// hold elements (unless the chunk is empty), removed ones in between are
// zero, and so is every slot outside. Outside the package it is only
// memory for the ring's growth (NewChunk, Give).
type Chunk[E comparable] struct {
	slots      []E // chunkLen long, or shorter while it is the ring's only chunk
	lo, hi     int
	live       int
	id         int
	prev, next *Chunk[E]
}

// NewQueue returns an empty Queue ordered by less, calling setIndex as
// Heap does (with the positions above).
func NewQueue[E comparable](less func(a, b E) bool, setIndex func(e E, i int)) *Queue[E] {
	return &Queue[E]{less: less, setIndex: setIndex, heap: Heap[E]{less: less, setIndex: setIndex}}
}

// Len returns the number of elements.
func (q *Queue[E]) Len() int { return q.live + q.heap.Len() }

func ringPos(id, slot int) int { return -2 - (id<<chunkBits | slot) }

// Push adds e: O(1) when e is not less than the last element in the ring,
// O(log n) otherwise. Either way growth moves at most chunkLen elements.
func (q *Queue[E]) Push(e E) {
	c := q.tail
	if q.live > 0 && q.less(e, c.slots[c.hi-1]) {
		q.heap.Push(e)
		return
	}
	if c == nil || c.hi == len(c.slots) {
		c = q.extend()
	}
	s := c.hi
	c.slots[s] = e
	c.hi++
	c.live++
	q.live++
	q.setIndex(e, ringPos(c.id, s))
}

// extend makes room at the back of the ring and returns its tail chunk,
// which then has a free slot at hi.
func (q *Queue[E]) extend() *Chunk[E] {
	c := q.tail
	switch {
	case c == nil:
		c = &Chunk[E]{slots: make([]E, minChunk)}
		q.link(c)
		return c
	case c != q.head || len(c.slots) == chunkLen && c.live > chunkLen/2:
		// The ring spans several chunks, or one full chunk: link another.
		n := q.spares[0]
		q.spares[0], q.spares[1] = q.spares[1], nil
		if n == nil {
			n = &Chunk[E]{slots: make([]E, chunkLen)}
		}
		q.link(n)
		return n
	case c.live <= len(c.slots)/2:
		q.pack(c, c, nil) // at least half of the only chunk is free
		return c
	}
	// The only chunk, more than half live: double it, keeping each slot.
	slots := make([]E, 2*len(c.slots))
	copy(slots[c.lo:c.hi], c.slots[c.lo:c.hi])
	q.moved += c.hi - c.lo
	c.slots = slots
	return c
}

// NewChunk returns an empty full-size chunk, for Give: a caller that
// guards the queue with a lock allocates it before taking the lock. Its
// memory is written once per page (of pointers), so that the page faults
// of memory fresh from the OS (which Go does not zero) are taken here too.
func NewChunk[E comparable]() *Chunk[E] {
	slots := make([]E, chunkLen)
	var zero E
	for i := 0; i < len(slots); i += 4096 / 8 {
		slots[i] = zero
	}
	return &Chunk[E]{slots: slots}
}

// WantsChunk reports whether the ring, grown past one chunk, holds no
// empty one for its next chunk. Until it is given one (Give), growing
// allocates it (8 KiB) under the caller's lock.
func (q *Queue[E]) WantsChunk() bool { return q.spares[0] == nil && q.head != q.tail }

// Give keeps c, from NewChunk, for the ring's next chunk if it wants one
// (WantsChunk), and drops it otherwise.
func (q *Queue[E]) Give(c *Chunk[E]) {
	if q.WantsChunk() {
		q.spares[0] = c
	}
}

// link gives c, empty, an id and links it at the back of the ring.
func (q *Queue[E]) link(c *Chunk[E]) {
	if k := len(q.freeIDs); k > 0 {
		c.id = q.freeIDs[k-1]
		q.freeIDs = q.freeIDs[:k-1]
	} else {
		c.id = len(q.byID)
		q.byID = append(q.byID, nil)
	}
	q.byID[c.id] = c
	c.prev, c.next = q.tail, nil
	if q.tail == nil {
		q.head = c
	} else {
		q.tail.next = c
	}
	q.tail = c
}

// unlink takes c, empty, out of the ring, and keeps it as a spare if the
// ring still has several chunks and fewer than two spares, or drops it. A
// steady stream through a long ring then allocates nothing: the chunk its
// front empties and the one allocated ahead of its back (Give) both fit.
func (q *Queue[E]) unlink(c *Chunk[E]) {
	if c.prev == nil {
		q.head = c.next
	} else {
		c.prev.next = c.next
	}
	if c.next == nil {
		q.tail = c.prev
	} else {
		c.next.prev = c.prev
	}
	q.byID[c.id] = nil
	q.freeIDs = append(q.freeIDs, c.id)
	c.prev, c.next, c.lo, c.hi = nil, nil, 0, 0
	if q.head != q.tail {
		if q.spares[1] == nil && len(c.slots) == chunkLen {
			q.spares[0], q.spares[1] = c, q.spares[0]
		}
		return
	}
	q.spares = [2]*Chunk[E]{}
	if len(q.byID) > renumberAbove {
		q.renumber(q.head)
	}
}

// renumberAbove is the number of chunk ids past which a ring that is
// back to one chunk renumbers it: not for a ring that swings between one
// chunk and a few, whose chunk would be renumbered on every swing.
const renumberAbove = 64

// renumber makes c, the ring's only chunk, chunk 0 and drops the ids of
// the chunks gone, so the index of chunks follows the ring after a burst.
func (q *Queue[E]) renumber(c *Chunk[E]) {
	if c.id != 0 {
		c.id = 0
		for s := c.lo; s < c.hi; s++ {
			if e := c.slots[s]; e != *new(E) {
				q.setIndex(e, ringPos(0, s))
				q.moved++
			}
		}
	}
	q.byID, q.freeIDs = append(q.byID[:0:0], c), nil
}

// pack moves the live elements of a, then those of b if not nil (the chunk
// after a), to the front of dst (a or b's predecessor a), in order,
// telling each its new position, and unlinks b.
func (q *Queue[E]) pack(dst, a, b *Chunk[E]) {
	var zero E
	k := 0
	for _, c := range [2]*Chunk[E]{a, b} {
		if c == nil {
			continue
		}
		for s := c.lo; s < c.hi; s++ {
			e := c.slots[s]
			if e == zero {
				continue
			}
			c.slots[s] = zero
			dst.slots[k] = e
			if c != dst || s != k {
				q.setIndex(e, ringPos(dst.id, k))
				q.moved++
			}
			k++
		}
	}
	dst.lo, dst.hi, dst.live = 0, k, k
	if b != nil {
		b.live = 0
		q.unlink(b)
	}
}

// Peek returns the least element; ok is false when the queue is empty.
func (q *Queue[E]) Peek() (e E, ok bool) {
	h, hok := q.heap.Peek()
	if q.live == 0 {
		return h, hok
	}
	f := q.head.slots[q.head.lo]
	if hok && q.less(h, f) {
		return h, true
	}
	return f, true
}

// Pop removes and returns the least element; ok is false when the queue is
// empty.
func (q *Queue[E]) Pop() (e E, ok bool) {
	h, hok := q.heap.Peek()
	if q.live == 0 || hok && q.less(h, q.head.slots[q.head.lo]) {
		return q.heap.Pop()
	}
	return q.removeAt(q.head, q.head.lo), true
}

// chunkAt returns the chunk and slot of ring position i (<= -2), or nil if
// no linked chunk has that id.
func (q *Queue[E]) chunkAt(i int) (*Chunk[E], int) {
	s := -2 - i
	if id := s >> chunkBits; id < len(q.byID) {
		return q.byID[id], s & chunkMask
	}
	return nil, 0
}

// At returns the element at position i, for audits.
func (q *Queue[E]) At(i int) E {
	if i >= 0 {
		return q.heap.At(i)
	}
	c, s := q.chunkAt(i)
	return c.slots[s]
}

// Contains reports whether position i is one an element can have now.
func (q *Queue[E]) Contains(i int) bool {
	switch {
	case i >= 0:
		return i < q.heap.Len()
	case i == -1:
		return false // "in no index"
	}
	c, s := q.chunkAt(i)
	return c != nil && c.lo <= s && s < c.hi
}

// Remove removes and returns the element at position i: O(1) in the ring
// (a merge of sparse chunks moves at most chunkLen elements), O(log n) in
// the heap.
func (q *Queue[E]) Remove(i int) E {
	if i >= 0 {
		return q.heap.Remove(i)
	}
	s := -2 - i
	c := q.tail // most often: an element pushed lately (a lease completed)
	if c.id != s>>chunkBits {
		c = q.byID[s>>chunkBits]
	}
	return q.removeAt(c, s&chunkMask)
}

// removeAt removes and returns the element in slot s of chunk c.
func (q *Queue[E]) removeAt(c *Chunk[E], s int) E {
	var zero E
	e := c.slots[s]
	c.slots[s] = zero
	c.live--
	q.live--
	q.setIndex(e, -1)
	switch {
	case c.live == 0 && c == q.head && c == q.tail:
		c.lo, c.hi = 0, 0 // the only chunk: kept, and filled from its front again
	case c.live == 0:
		p := c.prev
		q.unlink(c)
		if p != nil {
			q.tidy(p) // p and its new neighbour may be mergeable now
		}
	default:
		// Keep both ends on live elements, so Push and Peek read one
		// slot; a removed slot in the middle waits until they reach it.
		// Only an end removed moves (in locals: no reload of the chunk's
		// fields on each step), and it stops on a live slot, since the
		// chunk has one.
		if slots, lo, hi := c.slots, c.lo, c.hi; s == lo || s == hi-1 {
			for slots[lo] == zero {
				lo++
			}
			for slots[hi-1] == zero {
				hi--
			}
			c.lo, c.hi = lo, hi
		}
		if c.live <= chunkLen/8 {
			q.tidy(c)
		}
	}
	return e
}

// tidy merges c with a neighbour when one of the two is at most an eighth
// full and together they fill at most half a chunk, and then the result
// with its other neighbour if they now qualify: no two neighbours qualify
// afterwards if none did before c changed. The tail, still filling, is
// left alone. At most chunkLen elements move.
func (q *Queue[E]) tidy(c *Chunk[E]) {
	for range 2 {
		switch {
		case q.mergeable(c.prev, c):
			c = c.prev
			q.pack(c, c, c.next)
		case q.mergeable(c, c.next):
			q.pack(c, c, c.next)
		default:
			return
		}
	}
}

func (q *Queue[E]) mergeable(a, b *Chunk[E]) bool {
	return a != nil && b != nil && b != q.tail &&
		(a.live <= chunkLen/8 || b.live <= chunkLen/8) && a.live+b.live <= chunkLen/2
}

// Moved returns the number of elements moved (or copied) by growth,
// packs and merges since New, ring and heap, for tests and benchmarks of
// the work growth costs.
func (q *Queue[E]) Moved() int { return q.moved + q.heap.moved }

// Cap returns the capacity of the queue's memory (ring and heap), for
// tests of memory use.
func (q *Queue[E]) Cap() int {
	n := q.heap.Cap()
	for c := q.head; c != nil; c = c.next {
		n += len(c.slots)
	}
	for _, c := range q.spares {
		if c != nil {
			n += len(c.slots)
		}
	}
	return n
}

// Valid reports whether the ring's chunks are linked and indexed right,
// the ring is in order, the heap is valid, and every element knows its own
// position (checked with index), for audits.
func (q *Queue[E]) Valid(index func(E) int) bool {
	var prev E
	live, chunks := 0, 0
	var before *Chunk[E]
	for c := q.head; c != nil; before, c = c, c.next {
		chunks++
		if c.prev != before || c.id >= len(q.byID) || q.byID[c.id] != c || !q.validChunk(c, index, &prev) {
			return false
		}
		live += c.live
	}
	if before != q.tail || chunks+len(q.freeIDs) != len(q.byID) {
		return false
	}
	return live == q.live && q.heap.Valid(index)
}

// validChunk checks c's slots, their order after prev (the ring's last
// element before c, updated) and their positions.
func (q *Queue[E]) validChunk(c *Chunk[E], index func(E) int, prev *E) bool {
	var zero E
	if c.lo > c.hi || c.hi > len(c.slots) || c.live == 0 && (c != q.head || c != q.tail || c.hi != 0) {
		return false
	}
	if c.live > 0 && (c.slots[c.lo] == zero || c.slots[c.hi-1] == zero) {
		return false
	}
	live := 0
	for s, e := range c.slots {
		if e == zero {
			continue
		}
		if s < c.lo || s >= c.hi || index(e) != ringPos(c.id, s) || *prev != zero && q.less(e, *prev) {
			return false
		}
		*prev = e
		live++
	}
	return live == c.live
}

// Upcoming returns the element i places behind the ring's front (0 is the
// front), or the zero E if that slot is removed or past the ring's end, so
// a caller can read elements about to be popped before popping them.
// Elements in the heap part are not seen.
func (q *Queue[E]) Upcoming(i int) E {
	for c := q.head; c != nil && i >= 0; c = c.next {
		if i < c.hi-c.lo {
			return c.slots[c.lo+i]
		}
		i -= c.hi - c.lo
	}
	var zero E
	return zero
}

// Smallest calls yield with the queue's elements in order, smallest
// first, until yield returns false or k elements have been yielded,
// without changing the queue: the ring's in order from its front, merged
// with the heap's smallest, found by a walk of the heap's tree from its
// root (a candidate's children join the candidates when it is taken), so
// it costs O(k log k) however long the queue.
func (q *Queue[E]) Smallest(k int, yield func(E) bool) { q.SmallestAfter(nil, k, yield) }

// SmallestAfter is Smallest of the elements that before does not hold
// for (nil: every element). before must hold for a prefix of the order
// (for every element less than one it holds for): it says which
// elements come at or before where a page of them ended. Whole chunks
// of the ring before are skipped by their last element, and the heap's
// elements before are walked past, so it costs O(k log k), plus a step
// per chunk of the ring and per heap element before.
func (q *Queue[E]) SmallestAfter(before func(E) bool, k int, yield func(E) bool) {
	var zero E
	c, s := q.head, 0
	if before != nil {
		for c != nil && c.hi > c.lo && c.slots[c.hi-1] != zero && before(c.slots[c.hi-1]) {
			c = c.next
		}
	}
	if c != nil {
		s = c.lo
	}
	skip := func(e E) bool { return before != nil && before(e) }
	// ringNext returns the ring's next element, or false.
	ringNext := func() (E, bool) {
		for c != nil {
			for ; s < c.hi; s++ {
				if e := c.slots[s]; e != zero && !skip(e) {
					return e, true
				}
			}
			if c = c.next; c != nil {
				s = c.lo
			}
		}
		return zero, false
	}
	// cand is a min-heap of heap positions, by their elements.
	var cand []int
	lessAt := func(i, j int) bool { return q.less(q.heap.At(cand[i]), q.heap.At(cand[j])) }
	push := func(i int) {
		if i >= q.heap.Len() {
			return
		}
		cand = append(cand, i)
		for j := len(cand) - 1; j > 0 && lessAt(j, (j-1)/2); j = (j - 1) / 2 {
			cand[j], cand[(j-1)/2] = cand[(j-1)/2], cand[j]
		}
	}
	pop := func() int {
		top := cand[0]
		last := len(cand) - 1
		cand[0] = cand[last]
		cand = cand[:last]
		for i := 0; ; {
			m := i
			for _, ch := range []int{2*i + 1, 2*i + 2} {
				if ch < len(cand) && lessAt(ch, m) {
					m = ch
				}
			}
			if m == i {
				break
			}
			cand[i], cand[m] = cand[m], cand[i]
			i = m
		}
		return top
	}
	push(0)
	re, rok := ringNext()
	for n := 0; n < k; n++ {
		switch {
		case rok && (len(cand) == 0 || !q.less(q.heap.At(cand[0]), re)):
			if !yield(re) {
				return
			}
			s++
			re, rok = ringNext()
		case len(cand) > 0:
			i := pop()
			push(2*i + 1)
			push(2*i + 2)
			if skip(q.heap.At(i)) {
				n-- // walked past, not yielded
				continue
			}
			if !yield(q.heap.At(i)) {
				return
			}
		default:
			return
		}
	}
}
