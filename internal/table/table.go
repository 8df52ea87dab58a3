// Package table is the router's index of jobs by ID: an open-addressing
// hash table with linear probing whose slots hold a key's 64-bit hash and
// a pointer to its element.
//
// It does what a Go map[string]*V does, with two savings that matter when
// the table is far larger than the CPU's caches: an element is deleted by
// pointer, with the hash it was inserted with, so a delete reads one slot
// and never the key's bytes; and a lookup reads the key only when the full
// 64-bit hashes match, so a miss (every Enqueue of a new ID) reads one slot.
// Insert after a failed Find reuses the slot Find stopped at. Deletion
// shifts later entries back (no tombstones), so probe lengths stay short
// under churn.
package table

import (
	"hash/maphash"
	"iter"
)

// maxLoad is the fill, in eighths, past which the table doubles.
const maxLoad = 6

// minSlots is the smallest table; a table never shrinks below it.
const minSlots = 8

// A table shrinks when its fill falls below 1/shrinkBelow, to the size
// that puts the fill at about 3/8, as after a doubling, but never below
// shrinkFloor slots (16 KiB): memory that matters comes back, while a load
// that swings between empty and a few hundred elements (batches) keeps its
// table instead of regrowing it every time. The gap between 1/16 and 6/8
// is the hysteresis: a steady load never resizes back and forth, and each
// resize is paid for by at least as many inserts or deletes as it moves
// elements.
const (
	shrinkBelow = 16
	shrinkFloor = 1024
)

// Table maps string keys to *V. The zero value is not usable; make one
// with New. A Table is not safe for concurrent use: the router guards it
// with its own lock.
type Table[V any] struct {
	slots []slot[V] // power-of-two length
	n     int
	seed  maphash.Seed
	key   func(*V) string
}

type slot[V any] struct {
	hash uint64
	v    *V // nil: empty
}

// New returns an empty Table; key gives an element's key.
func New[V any](key func(*V) string) *Table[V] {
	return &Table[V]{slots: make([]slot[V], minSlots), seed: maphash.MakeSeed(), key: key}
}

// Hash returns the hash of key, for Find, Insert and Delete. It reads only
// the seed, fixed at New, so it is safe without the table's guard.
func (t *Table[V]) Hash(key string) uint64 { return maphash.String(t.seed, key) }

// Len returns the number of elements.
func (t *Table[V]) Len() int { return t.n }

// Find returns the element with key (whose hash is h), or nil and the
// position where Insert must put it.
func (t *Table[V]) Find(key string, h uint64) (v *V, pos int) {
	mask := len(t.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
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
// nothing, with no change to the table in between.
func (t *Table[V]) Insert(v *V, h uint64, pos int) {
	t.slots[pos] = slot[V]{hash: h, v: v}
	t.n++
	if t.n*8 > len(t.slots)*maxLoad {
		t.grow()
	}
}

func (t *Table[V]) grow() { t.resize(2 * len(t.slots)) }

// resize moves every element into a new table of size slots (a power of
// two that holds them under maxLoad).
func (t *Table[V]) resize(size int) {
	old := t.slots
	t.slots = make([]slot[V], size)
	mask := len(t.slots) - 1
	for _, s := range old {
		if s.v == nil {
			continue
		}
		i := int(s.hash) & mask
		for t.slots[i].v != nil {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// Delete removes v, inserted with hash h, and reports whether it was
// there.
func (t *Table[V]) Delete(v *V, h uint64) bool {
	mask := len(t.slots) - 1
	i := int(h) & mask
	for t.slots[i].v != v {
		if t.slots[i].v == nil {
			return false
		}
		i = (i + 1) & mask
	}
	// Shift back each later entry of the run that may move into the hole:
	// one whose home slot is not cyclically in (hole, its slot].
	for j := (i + 1) & mask; t.slots[j].v != nil; j = (j + 1) & mask {
		home := int(t.slots[j].hash) & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot[V]{}
	t.n--
	if t.n*shrinkBelow < len(t.slots) && len(t.slots) > shrinkFloor {
		size := shrinkFloor
		for size*3 < t.n*8 { // fill at most 3/8
			size *= 2
		}
		t.resize(size)
	}
	return true
}

// Cap returns the number of slots, for tests of memory use.
func (t *Table[V]) Cap() int { return len(t.slots) }

// All yields every element, in no particular order. The table must not
// change during the iteration.
func (t *Table[V]) All() iter.Seq[*V] {
	return func(yield func(*V) bool) {
		for _, s := range t.slots {
			if s.v != nil && !yield(s.v) {
				return
			}
		}
	}
}

// Valid reports whether every element is reachable from its home slot
// with its stored hash, that hash is its key's, and the count is right,
// for audits.
func (t *Table[V]) Valid() bool {
	n := 0
	for _, s := range t.slots {
		if s.v == nil {
			continue
		}
		n++
		if s.hash != t.Hash(t.key(s.v)) {
			return false
		}
		if got, _ := t.Find(t.key(s.v), s.hash); got != s.v {
			return false
		}
	}
	return n == t.n
}

// Touch reads the slots a Delete of an element with hash h starts at (its
// home slot and the next cache line's) and returns a value the caller must
// use, so that it is not optimised away. A caller about to delete many
// elements touches them all first: the loads do not depend on each other,
// so their cache misses overlap instead of being paid one by one.
func (t *Table[V]) Touch(h uint64) uint64 {
	mask := len(t.slots) - 1
	i := int(h) & mask
	return t.slots[i].hash ^ t.slots[(i+4)&mask].hash // 4 slots of 16 bytes: the next 64-byte line
}
