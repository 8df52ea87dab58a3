// Package order keeps the router's jobs in enqueue order, for listing them
// newest first a page at a time (Router.List), with the count of each
// chunk's jobs in each state so that a walk for a few states skips the
// chunks that have none.
//
// A Log is a sorted list of chunks of at most chunkLen slots. Each slot
// holds an element and its sequence number (its enqueue order: appended
// in increasing order, so appending is O(1) at the last chunk); a removed
// element leaves its slot empty (nil), so removing is a binary search of
// one chunk's sequence numbers, never a shift. Each element knows its
// chunk (the caller stores it, through setChunk), so moving an element
// from one class to another (a job's change of state) touches only that
// chunk's counts: two increments, no search.
//
// Memory follows the live elements: a chunk left empty is dropped, a
// chunk below an eighth full is merged with a neighbour when the two fill
// at most half a chunk, or else packed to its live slots. Every step moves
// at most chunkLen elements, and the list of chunks is one pointer per
// chunkLen/8 elements at worst, so no operation under the router's lock
// touches more than a few thousand words.
package order

import (
	"cmp"
	"slices"
)

// chunkLen is the most slots a chunk has.
const chunkLen = 512

// Classes is how many classes (the caller's states) a chunk counts.
const Classes = 8

// Log is the elements in sequence order. The zero value is not usable;
// make one with New. It is not safe for concurrent use.
type Log[E any] struct {
	chunks   []*Chunk[E] // ascending by sequence number; none empty
	spare    *Chunk[E]   // the last chunk emptied, kept for the next (a job at a time: no allocation)
	live     int
	setChunk func(e *E, c *Chunk[E])
}

// Chunk is a run of slots of a Log, in sequence order.
type Chunk[E any] struct {
	seqs   []uint64
	items  []*E // nil: removed
	live   int
	counts [Classes]int32 // live elements by class
}

// New returns an empty Log; setChunk records an element's chunk in it
// (the Log calls it whenever the chunk changes).
func New[E any](setChunk func(e *E, c *Chunk[E])) *Log[E] {
	return &Log[E]{setChunk: setChunk}
}

// Len returns the number of live elements.
func (l *Log[E]) Len() int { return l.live }

// Append adds e, of class class, with sequence number seq, greater than
// that of every element appended before, and returns its chunk, which
// the caller records in e (Append does not call setChunk: the hot path
// of every enqueue saves an indirect call).
func (l *Log[E]) Append(e *E, seq uint64, class uint8) *Chunk[E] {
	if n := len(l.chunks); n > 0 && len(l.chunks[n-1].items) == chunkLen && l.chunks[n-1].live <= chunkLen/8 {
		// The last chunk is full but sparse: its elements were removed
		// while it was the last, which Remove does not shrink. Shrink it
		// now (merged with the one before or packed: either way the last
		// chunk then has room), rather than leave it behind mostly empty.
		l.shrink(n - 1)
	}
	var c *Chunk[E]
	if n := len(l.chunks); n > 0 && len(l.chunks[n-1].items) < chunkLen {
		c = l.chunks[n-1]
	} else {
		if c = l.spare; c != nil {
			l.spare = nil
		} else {
			// A chunk starts small, so that a few elements take little;
			// the one after a full chunk (a burst) starts full-sized,
			// which saves its growth by doubling half its garbage.
			size := 16
			if n > 0 {
				size = chunkLen
			}
			c = &Chunk[E]{seqs: make([]uint64, 0, size), items: make([]*E, 0, size)}
		}
		l.chunks = append(l.chunks, c)
	}
	c.seqs = append(c.seqs, seq)
	c.items = append(c.items, e)
	c.live++
	c.counts[class]++
	l.live++
	return c
}

// Move moves one element of c from class from to class to.
func (c *Chunk[E]) Move(from, to uint8) {
	c.counts[from]--
	c.counts[to]++
}

// slot returns the index of seq in c, or -1. Sequence numbers come one
// by one (a job's is its enqueue's), so until a chunk is packed its slot
// i holds its first one plus i: that guess is tried first.
func (c *Chunk[E]) slot(seq uint64) int {
	if len(c.seqs) == 0 { // emptied: the spare
		return -1
	}
	i := int(seq - c.seqs[0])
	if seq < c.seqs[0] || i >= len(c.seqs) || c.seqs[i] != seq {
		var ok bool
		if i, ok = slices.BinarySearch(c.seqs, seq); !ok {
			return -1
		}
	}
	if c.items[i] == nil {
		return -1
	}
	return i
}

// Holds reports whether e is c's element with sequence number seq.
func (c *Chunk[E]) Holds(seq uint64, e *E) bool {
	i := c.slot(seq)
	return i >= 0 && c.items[i] == e
}

// Replace puts e in the place of the element of c with sequence number
// seq (same class), and records c as e's chunk. It reports whether there
// was one.
func (l *Log[E]) Replace(c *Chunk[E], seq uint64, e *E) bool {
	i := c.slot(seq)
	if i < 0 {
		return false
	}
	c.items[i] = e
	l.setChunk(e, c)
	return true
}

// Remove removes the element of c with sequence number seq, of class
// class, and reports whether there was one.
func (l *Log[E]) Remove(c *Chunk[E], seq uint64, class uint8) bool {
	i := c.slot(seq)
	if i < 0 {
		return false
	}
	c.items[i] = nil
	c.live--
	c.counts[class]--
	l.live--
	switch {
	case c.live == 0:
		k := l.index(c)
		l.chunks = slices.Delete(l.chunks, k, k+1)
		l.recycle(c)
	case c.live <= chunkLen/8 && c != l.chunks[len(l.chunks)-1]: // the last is appended to
		l.shrink(l.index(c))
	}
	return true
}

// recycle keeps c, out of the list now and holding no live element, as
// the spare (the next chunk Append starts), unless the spare has as much
// room already: the chunks of a queue drained in order (packed on the
// way: shrink) become the new chunks of its tail, with no allocation
// while the two keep pace. One spare at most, so the memory kept is one
// chunk's.
func (l *Log[E]) recycle(c *Chunk[E]) {
	if l.spare != nil && cap(l.spare.items) >= cap(c.items) {
		return
	}
	clear(c.items)
	c.seqs, c.items, c.live, c.counts = c.seqs[:0], c.items[:0], 0, [Classes]int32{}
	l.spare = c
}

// index returns c's position in l.chunks: the first or the last, most
// often (jobs end in about the order they came), else searched.
func (l *Log[E]) index(c *Chunk[E]) int {
	if n := len(l.chunks); l.chunks[n-1] == c {
		return n - 1
	} else if l.chunks[0] == c {
		return 0
	}
	return l.search(c.seqs[0])
}

// search returns the position of the first chunk whose first sequence
// number is at least seq (len(l.chunks) if none).
func (l *Log[E]) search(seq uint64) int {
	k, _ := slices.BinarySearchFunc(l.chunks, seq, func(x *Chunk[E], seq uint64) int {
		return cmp.Compare(x.seqs[0], seq)
	})
	return k
}

// shrink merges the sparse chunk at k with a neighbour when the two fill
// at most half a chunk, or else packs it when at most a quarter of its
// slots are live.
func (l *Log[E]) shrink(k int) {
	c := l.chunks[k]
	for _, n := range []int{k - 1, k + 1} {
		if n < 0 || n >= len(l.chunks) || c.live+l.chunks[n].live > chunkLen/2 {
			continue
		}
		lo := min(k, n)
		l.chunks[lo] = l.pack(l.chunks[lo], l.chunks[lo+1])
		l.chunks = slices.Delete(l.chunks, lo+1, lo+2)
		return
	}
	if len(c.items) >= 64 && c.live <= len(c.items)/4 {
		l.chunks[k] = l.pack(c, nil)
	}
}

// pack returns a chunk with the live elements of a, then of b (nil: none),
// with room for as many again, and records it as their chunk.
func (l *Log[E]) pack(a, b *Chunk[E]) *Chunk[E] {
	n := a.live
	if b != nil {
		n += b.live
	}
	p := &Chunk[E]{seqs: make([]uint64, 0, max(16, 2*n)), items: make([]*E, 0, max(16, 2*n))}
	for _, c := range []*Chunk[E]{a, b} {
		if c == nil {
			continue
		}
		for i, e := range c.items {
			if e != nil {
				p.seqs = append(p.seqs, c.seqs[i])
				p.items = append(p.items, e)
				l.setChunk(e, p)
			}
		}
		p.live += c.live
		for s := range p.counts {
			p.counts[s] += c.counts[s]
		}
		l.recycle(c) // its live elements are p's now
	}
	return p
}

// Walk calls f with the live elements whose sequence number is below
// before (0: no bound), newest first, skipping the chunks with no element
// of a class in mask (bit s: class s), until f returns false or budget
// slots have been looked at (a chunk skipped counts as one slot). It returns the sequence number to resume
// below, and whether any slot is left there: false once the walk has
// reached the oldest element.
func (l *Log[E]) Walk(before uint64, mask uint8, budget int, f func(e *E) bool) (resume uint64, more bool) {
	k := len(l.chunks) - 1
	if before != 0 {
		// The last chunk whose first element is below before.
		k = l.search(before) - 1
	}
	for ; k >= 0; k-- {
		c := l.chunks[k]
		if !c.has(mask) {
			// A chunk skipped costs a slot of the budget: with many
			// chunks and none of the classes, the walk is still bounded.
			if budget <= 0 && before != 0 {
				return before, true
			}
			budget--
			before = c.seqs[0]
			continue
		}
		i := len(c.seqs) - 1
		if before != 0 {
			n, _ := slices.BinarySearch(c.seqs, before)
			i = n - 1
		}
		for ; i >= 0; i-- {
			if budget <= 0 {
				return c.seqs[i] + 1, true
			}
			budget--
			if e := c.items[i]; e != nil && !f(e) {
				return c.seqs[i], true
			}
		}
		before = c.seqs[0]
	}
	return 0, false
}

// has reports whether c has a live element of a class in mask.
func (c *Chunk[E]) has(mask uint8) bool {
	for s := range c.counts {
		if mask&(1<<s) != 0 && c.counts[s] > 0 {
			return true
		}
	}
	return false
}
