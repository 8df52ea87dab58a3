// Package table is the router's index of jobs by ID: a hash table whose
// slots hold a key's 64-bit hash and a pointer to its element, split into
// segments so that it grows and shrinks a bounded step at a time.
//
// It does what a Go map[string]*V does, with two savings that matter when
// the table is far larger than the CPU's caches: an element is deleted by
// pointer, with the hash it was inserted with, so a delete reads one slot
// and never the key's bytes; and a lookup reads the key only when the full
// 64-bit hashes match, so a miss (every Enqueue of a new ID) reads one slot.
// Insert after a failed Find reuses the slot Find stopped at.
//
// # Growth in bounded steps
//
// The table is extendible hashing (Fagin et al. 1979), as Go's swiss-table
// maps do it since Go 1.24: a directory of 2^depth entries, indexed by the
// top depth bits of a hash, points at segments of at most segSlots slots
// (entries of 16 bytes, one per one or more segments). A segment is an
// open-addressing table with linear probing on the low bits of the hash;
// deletion shifts later entries back (no tombstones), so probe lengths
// stay short under churn. A segment that reaches its load splits alone,
// in place, by the next bit of the hash: the elements with that bit set
// move to a new segment, the rest stay (re-seated where the leavers left
// holes), and both are one level deeper; the directory doubles when that
// exceeds its depth, which copies entries only. Two buddy segments (same
// local depth, differing in its last bit) merge once they hold at most a
// quarter of a segment together, and the directory halves when no segment
// needs its last bit. So no Insert or Delete moves more than
// segSlots*maxLoad/8+1 elements (a split: about 0.1 ms, BenchmarkTableSplit),
// however large the table, and no allocation is larger than one segment
// or the directory: the router's lock is never held for a rehash of
// everything. A caller can even allocate the next split's segment before
// taking its lock (NewSegment, WantsSegment, Give).
//
// While the table fits in one segment, that segment grows by doubling from
// minSlots and shrinks back (to shrinkFloor) the same way, so a small
// table costs little memory, and its operations read no directory (lone).
package table

import (
	"hash/maphash"
	"iter"
	"math/rand/v2"
)

// segSlots is the most slots a segment has (64 KiB of slots): it bounds
// the elements an operation moves, and the directory of 10M elements has
// about 8,192 entries.
const segSlots = 1 << 12

// maxLoad is the fill, in eighths, past which a segment doubles (while it
// is the only one and smaller than segSlots) or splits.
const maxLoad = 6

// minSlots is the smallest table; a table never shrinks below it.
const minSlots = 8

// Two buddy segments merge once they hold at most mergeAt elements
// together: after a split, the two halves hold about 3/4 of a segment
// together, so a merge is paid for by at least half a segment's deletes,
// and a split by half a segment's inserts (the hysteresis that keeps a
// steady load from splitting and merging back and forth).
const mergeAt = segSlots / 4

// The table's only segment shrinks when its fill falls below
// 1/shrinkBelow, to the size that puts the fill at about 3/8, as after a
// doubling, but never below shrinkFloor slots (16 KiB): memory that
// matters comes back, while a load that swings between empty and a few
// hundred elements (batches) keeps its segment instead of regrowing it
// every time.
const (
	shrinkBelow = 16
	shrinkFloor = 1024
)

// Table maps string keys to *V. The zero value is not usable; make one
// with New. A Table is not safe for concurrent use: the router guards it
// with its own lock.
type Table[V any] struct {
	dir   []entry[V] // 1<<depth entries; entry i: the keys whose hash's top depth bits are i
	shift uint       // 64 - depth: a hash's directory entry is h >> shift (0 when depth is 0)
	depth uint       // global depth
	deep  int        // segments whose local depth is depth: the directory halves when none is
	n     int
	// lone is the slots of the table's only segment while it has one
	// (depth 0), else nil: a small table's operations read no directory,
	// and count its elements in n alone (the segment's n is set when it
	// resizes or splits).
	lone  []slot[V]
	moved int         // elements moved by doublings, splits, merges and shrinks since New (for tests)
	spare *Segment[V] // an empty full-size segment for the next split: given, or emptied by a merge
	seeds seeds
	key   func(*V) string
}

// A Segment holds the elements whose hashes share their top depth bits: a
// run of 1<<(t.depth-depth) directory entries points at it. Outside the
// package it is only memory for a split (NewSegment, Give).
type Segment[V any] struct {
	slots []slot[V] // power-of-two length; segSlots unless the segment is the table's only one
	n     int
	depth uint // local depth
}

// An entry of the directory: a segment, and its slots when it has
// segSlots (always, once the table has more than one), so that a lookup
// goes from the entry to the slot with no load in between and a constant
// mask.
type entry[V any] struct {
	slots *[segSlots]slot[V]
	seg   *Segment[V]
}

// entryOf returns the directory entry of seg.
func entryOf[V any](seg *Segment[V]) entry[V] {
	e := entry[V]{seg: seg}
	if len(seg.slots) == segSlots {
		e.slots = (*[segSlots]slot[V])(seg.slots)
	}
	return e
}

type slot[V any] struct {
	hash uint64
	v    *V // nil: empty
}

// New returns an empty Table; key gives an element's key.
func New[V any](key func(*V) string) *Table[V] {
	seg := &Segment[V]{slots: make([]slot[V], minSlots)}
	return &Table[V]{
		dir: []entry[V]{{seg: seg}}, shift: 64, deep: 1, lone: seg.slots, key: key,
		seeds: seeds{long: maphash.MakeSeed(), short: [3]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64()}},
	}
}

// Hash returns the hash of key, for Find, Insert and Delete. It reads only
// the seeds, fixed at New, so it is safe without the table's guard. Both
// of its hashes (seeds.hash) are seeded at random per table, so no one can
// choose keys that collide in a table they cannot see.
func (t *Table[V]) Hash(key string) uint64 { return t.seeds.hash(key) }

// Len returns the number of elements.
func (t *Table[V]) Len() int { return t.n }

// seg returns the directory entry of the keys of hash h.
func (t *Table[V]) seg(h uint64) *entry[V] { return &t.dir[h>>t.shift] }

// Find returns the element with key (whose hash is h), or nil and the
// position where Insert must put it.
func (t *Table[V]) Find(key string, h uint64) (v *V, pos int) {
	slots := t.lone
	if slots == nil {
		slots = t.seg(h).slots[:]
	}
	mask := len(slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &slots[i]
		if s.v == nil {
			return nil, i
		}
		if s.hash == h && t.key(s.v) == key {
			return s.v, i
		}
	}
}

// Get returns the element with key, or nil.
func (t *Table[V]) Get(key string) *V {
	v, _ := t.Find(key, t.Hash(key))
	return v
}

// Insert adds v, with hash h, at pos as returned by a Find that found
// nothing, with no change to the table in between. It moves at most
// segSlots elements (a doubling or a split of v's segment).
func (t *Table[V]) Insert(v *V, h uint64, pos int) {
	t.n++
	if slots := t.lone; slots != nil {
		slots[pos] = slot[V]{hash: h, v: v}
		if t.n*8 > len(slots)*maxLoad {
			t.growLone(h)
		}
		return
	}
	e := t.seg(h)
	e.slots[pos&(segSlots-1)] = slot[V]{hash: h, v: v}
	seg := e.seg
	seg.n++
	if seg.n*8 > segSlots*maxLoad {
		t.split(seg, h)
	}
}

// growLone doubles the table's only segment, which is over its load, or
// splits it (h is the hash just inserted) once it has segSlots slots.
func (t *Table[V]) growLone(h uint64) {
	seg := t.dir[0].seg
	seg.n = t.n
	if len(seg.slots) < segSlots {
		t.resize(seg, 2*len(seg.slots))
		t.lone, t.dir[0] = seg.slots, entryOf(seg)
		return
	}
	t.lone = nil
	t.split(seg, h)
}

// put adds s to the segment's slots, which have room and do not hold it.
func (seg *Segment[V]) put(s slot[V]) {
	mask := len(seg.slots) - 1
	i := int(s.hash) & mask
	for seg.slots[i].v != nil {
		i = (i + 1) & mask
	}
	seg.slots[i] = s
	seg.n++
}

// resize moves the elements of seg, the table's only segment, into new
// slots of the given size (a power of two that holds them under maxLoad).
func (t *Table[V]) resize(seg *Segment[V], size int) {
	old := seg.slots
	seg.slots, seg.n = make([]slot[V], size), 0
	for _, s := range old {
		if s.v != nil {
			seg.put(s)
		}
	}
	t.moved += seg.n
}

// split splits seg, which holds hash h and is over its load, in place:
// the elements whose hash has the next bit set move to a new segment (the
// spare, if a merge left one), the others stay, and both are one level
// deeper; the directory doubles first if seg is as deep as it. One
// allocation of segSlots slots at most, and seg.n elements moved.
func (t *Table[V]) split(seg *Segment[V], h uint64) {
	if seg.depth == t.depth {
		t.double()
	}
	t.moved += seg.n
	d := seg.depth + 1
	hi := t.spare
	t.spare = nil
	if hi == nil {
		hi = &Segment[V]{slots: make([]slot[V], segSlots)}
	}
	hi.depth = d
	bit := uint64(1) << (64 - d) // the bit that tells seg's elements from hi's
	slots := seg.slots
	e := 0 // a slot empty before the split: no run goes past it
	for slots[e].v != nil {
		e++
	}
	for i, s := range slots {
		if s.v != nil && s.hash&bit != 0 {
			hi.put(s)
			slots[i] = slot[V]{}
			seg.n--
		}
	}
	seg.reseat(e)
	span := 1 << (t.depth - seg.depth) // directory entries pointing at seg
	start := int(h>>t.shift) &^ (span - 1)
	for i := range span / 2 {
		t.dir[start+i], t.dir[start+span/2+i] = entryOf(seg), entryOf(hi)
	}
	seg.depth = d
	if d == t.depth {
		t.deep += 2
	}
	// With a random seed, a split leaves a half over its load only with
	// negligible probability; if it does, that half splits on its next
	// Insert.
}

// reseat moves each element of seg, some of whose slots were emptied
// without shifting the later entries back, to the first empty slot from
// its home, so that every element is reachable again. It goes round from
// slot e, empty before the slots were emptied, so no element's probe run
// goes past it: every element before the one it moves, in its run, is in
// place already, and the slot it leaves is the furthest it can go.
func (seg *Segment[V]) reseat(e int) {
	slots := seg.slots
	mask := len(slots) - 1
	for k := 1; k <= mask; k++ {
		i := (e + k) & mask
		if s := slots[i]; s.v != nil && int(s.hash)&mask != i {
			slots[i] = slot[V]{}
			seg.n--
			seg.put(s)
		}
	}
}

// double doubles the directory: entry i becomes entries 2i and 2i+1. It
// copies entries only (16 bytes each; at 10M elements, 8,192 of them).
func (t *Table[V]) double() {
	dir := make([]entry[V], 2*len(t.dir))
	for i, e := range t.dir {
		dir[2*i], dir[2*i+1] = e, e
	}
	t.dir, t.depth, t.shift, t.deep = dir, t.depth+1, t.shift-1, 0
}

// NewSegment returns an empty full-size segment, for Give: a caller that
// guards the table with a lock allocates it before taking the lock. Its
// memory is written once per page, so that the page faults of memory
// fresh from the OS (which Go does not zero) are taken here too.
func NewSegment[V any]() *Segment[V] {
	slots := make([]slot[V], segSlots)
	for i := 0; i < len(slots); i += pageSlots {
		slots[i].hash = 0
	}
	return &Segment[V]{slots: slots}
}

// pageSlots is the number of slots in a 4 KiB page.
const pageSlots = 4096 / 16

// WantsSegment reports whether the table, grown past one segment, holds no
// empty one for its next split. Until it is given one (Give), that split
// allocates it: 64 KiB, zeroed, possibly charged with the garbage
// collector's work, under the caller's lock.
func (t *Table[V]) WantsSegment() bool { return t.spare == nil && t.depth > 0 }

// Give keeps seg, from NewSegment, for the next split if the table wants
// one (WantsSegment), and drops it otherwise.
func (t *Table[V]) Give(seg *Segment[V]) {
	if t.WantsSegment() {
		t.spare = seg
	}
}

// Delete removes v, inserted with hash h, and reports whether it was
// there. It moves at most segSlots/2 elements (merges of v's segment with
// its buddies, or a shrink of the table's only segment).
func (t *Table[V]) Delete(v *V, h uint64) bool {
	var seg *Segment[V]
	slots := t.lone
	if slots == nil {
		e := t.seg(h)
		seg, slots = e.seg, e.slots[:]
	}
	mask := len(slots) - 1
	i := int(h) & mask
	for slots[i].v != v {
		if slots[i].v == nil {
			return false
		}
		i = (i + 1) & mask
	}
	// Shift back each later entry of the run that may move into the hole:
	// one whose home slot is not cyclically in (hole, its slot].
	for j := (i + 1) & mask; slots[j].v != nil; j = (j + 1) & mask {
		home := int(slots[j].hash) & mask
		if (j-home)&mask >= (j-i)&mask {
			slots[i] = slots[j]
			i = j
		}
	}
	slots[i] = slot[V]{}
	t.n--
	if seg == nil {
		if t.n*shrinkBelow < len(slots) && len(slots) > shrinkFloor {
			t.shrinkLone()
		}
		return true
	}
	seg.n--
	if seg.n <= mergeAt {
		t.shrink(seg, h)
	}
	return true
}

// shrink gives memory back after a Delete from seg, which holds hash h: it
// merges seg with its buddy while the two hold at most mergeAt elements,
// halving the directory when no segment needs its last bit, and shrinks
// the table's only segment once it is mostly empty. The elements moved add
// up to at most mergeAt (each merge moves the smaller segment's, and a
// chain of merges ends in one segment of at most mergeAt) plus the shrink's
// fewer than segSlots/shrinkBelow.
func (t *Table[V]) shrink(seg *Segment[V], h uint64) {
	for seg.depth > 0 {
		span := 1 << (t.depth - seg.depth)
		start := int(h>>t.shift) &^ (span - 1)
		buddy := t.dir[start^span].seg
		if buddy.depth != seg.depth || seg.n+buddy.n > mergeAt {
			return
		}
		seg = t.merge(seg, buddy, start&^span, 2*span)
	}
	t.lone = seg.slots // merged into one
	if t.n*shrinkBelow < len(seg.slots) && len(seg.slots) > shrinkFloor {
		t.shrinkLone()
	}
}

// shrinkLone shrinks the table's only segment, mostly empty, to the size
// that puts its fill at about 3/8 (never below shrinkFloor).
func (t *Table[V]) shrinkLone() {
	seg := t.dir[0].seg
	seg.n = t.n
	size := shrinkFloor
	for size*3 < seg.n*8 { // fill at most 3/8
		size *= 2
	}
	t.resize(seg, size)
	t.lone, t.dir[0] = seg.slots, entryOf(seg)
}

// merge merges buddies a and b, which together take the span directory
// entries from start, into one segment a level shallower and returns it:
// the one with more elements, into which the other's move. The other,
// emptied, is kept for the next split.
func (t *Table[V]) merge(a, b *Segment[V], start, span int) *Segment[V] {
	if a.n < b.n {
		a, b = b, a
	}
	for i, s := range b.slots {
		if s.v != nil {
			a.put(s)
			b.slots[i] = slot[V]{}
		}
	}
	t.moved += b.n
	b.n = 0
	t.spare = b
	if a.depth == t.depth {
		t.deep -= 2
	}
	a.depth--
	for i := range span {
		t.dir[start+i] = entryOf(a)
	}
	for t.deep == 0 && t.depth > 0 {
		t.halve()
	}
	if t.depth == 0 {
		t.spare = nil // no split is near
	}
	return a
}

// halve halves the directory, which no segment is as deep as: entries 2i
// and 2i+1 point at the same segment and become entry i.
func (t *Table[V]) halve() {
	dir := make([]entry[V], len(t.dir)/2)
	t.depth, t.shift, t.deep = t.depth-1, t.shift+1, 0
	for i := range dir {
		dir[i] = t.dir[2*i]
		if dir[i].seg.depth == t.depth {
			t.deep++ // a segment as deep as the directory has one entry
		}
	}
	t.dir = dir
}

// Moved returns the number of elements moved by doublings, splits, merges
// and shrinks since New, for tests and benchmarks of the work growth costs.
func (t *Table[V]) Moved() int { return t.moved }

// Cap returns the number of slots, for tests of memory use.
func (t *Table[V]) Cap() int {
	n := 0
	for seg := range t.segments() {
		n += len(seg.slots)
	}
	return n
}

// segments yields each segment once, in directory order.
func (t *Table[V]) segments() iter.Seq[*Segment[V]] {
	return func(yield func(*Segment[V]) bool) {
		for i := 0; i < len(t.dir); i += 1 << (t.depth - t.dir[i].seg.depth) {
			if !yield(t.dir[i].seg) {
				return
			}
		}
	}
}

// All yields every element, in no particular order. The table must not
// change during the iteration.
func (t *Table[V]) All() iter.Seq[*V] {
	return func(yield func(*V) bool) {
		for seg := range t.segments() {
			for _, s := range seg.slots {
				if s.v != nil && !yield(s.v) {
					return
				}
			}
		}
	}
}

// Valid reports whether the directory and the segments are consistent
// (each segment's run of entries, depths, counts, sizes), every element is
// in the segment its hash belongs to and reachable from its home slot with
// its stored hash, and that hash is its key's, for audits.
func (t *Table[V]) Valid() bool {
	if len(t.dir) != 1<<t.depth || t.shift != 64-t.depth {
		return false
	}
	if t.depth == 0 {
		seg := t.dir[0].seg
		if len(t.lone) != len(seg.slots) || &t.lone[0] != &seg.slots[0] || seg.depth != 0 || t.deep != 1 {
			return false
		}
		size := len(seg.slots)
		return size&(size-1) == 0 && size >= minSlots && size <= segSlots && t.n < size && t.validSegment(seg, 0, t.n)
	}
	if t.lone != nil {
		return false
	}
	n, deep := 0, 0
	for i := 0; i < len(t.dir); {
		seg := t.dir[i].seg
		if seg.depth > t.depth {
			return false
		}
		span := 1 << (t.depth - seg.depth)
		if i%span != 0 || i+span > len(t.dir) {
			return false
		}
		for _, other := range t.dir[i : i+span] {
			if other != entryOf(seg) {
				return false
			}
		}
		if len(seg.slots) != segSlots || seg.n >= segSlots || !t.validSegment(seg, i, seg.n) {
			return false
		}
		if seg.depth == t.depth {
			deep++
		}
		n += seg.n
		i += span
	}
	return n == t.n && deep == t.deep
}

// validSegment checks the elements of seg, whose entries start at i, and
// that it holds n.
func (t *Table[V]) validSegment(seg *Segment[V], i, n int) bool {
	for _, s := range seg.slots {
		if s.v == nil {
			continue
		}
		n--
		if s.hash != t.Hash(t.key(s.v)) || int(s.hash>>t.shift)>>(t.depth-seg.depth) != i>>(t.depth-seg.depth) {
			return false
		}
		if got, _ := t.Find(t.key(s.v), s.hash); got != s.v {
			return false
		}
	}
	return n == 0
}

// Touch reads the slots a Delete of an element with hash h starts at (its
// home slot and the next cache line's) and returns a value the caller must
// use, so that it is not optimised away. A caller about to delete many
// elements touches them all first: the loads do not depend on each other,
// so their cache misses overlap instead of being paid one by one.
func (t *Table[V]) Touch(h uint64) uint64 {
	slots := t.lone
	if slots == nil {
		slots = t.seg(h).slots[:]
	}
	mask := len(slots) - 1
	i := int(h) & mask
	return slots[i].hash ^ slots[(i+4)&mask].hash // 4 slots of 16 bytes: the next 64-byte line
}
