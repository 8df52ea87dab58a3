package leaserouter

import (
	"sync/atomic"

	"github.com/leaserouter/leaserouter/internal/heap"
	"github.com/leaserouter/leaserouter/internal/table"
)

// Allocation outside the lock. The garbage collector may charge an
// allocation with its own work — an assist, or the start of a cycle —
// which takes milliseconds when millions of jobs are to be marked: an
// allocation under the router's lock would hold the lock that long. So
// Enqueue allocates its job record, and TryAcquire and Acquire their
// Lease, before taking the lock (EnqueueMany and the batch grants already
// allocate one block per batch there).
//
// The same holds for the ID index and the ready queue, which grow in
// bounded steps (see the internal packages): the index by splitting a
// segment into a new one (64 KiB), the ring by linking a chunk (8 KiB).
// Each keeps one empty block in reserve, and Enqueue and EnqueueMany
// allocate the next one before they take the lock when an earlier call
// left word (growHint) that one is wanted. A step that finds no reserve
// (the first, or one of several in a batch) allocates under the lock.

// growHint is what the ID index and the ready queue want for their next
// growth step: want is read before the lock is taken, and written under
// it when it changes (last is its value, under the lock).
type growHint struct {
	want atomic.Uint32 // wantSegment | wantChunk
	last uint32
}

const (
	wantSegment = 1 << iota // the ID index wants a segment
	wantChunk               // the ready queue wants a chunk
)

// growthMem is memory allocated before the lock for the next growth step
// of the ID index and the ready queue; nil where none was wanted.
type growthMem[T any] struct {
	segment *table.Segment[job[T]]
	chunk   *heap.Chunk[*job[T]]
}

// prealloc allocates what the last word said the index and the ready
// queue want. It reads only an atomic: called before taking r.mu.
func (r *Router[T]) prealloc() (m growthMem[T]) {
	if w := r.growth.want.Load(); w != 0 {
		if w&wantSegment != 0 {
			m.segment = table.NewSegment[job[T]]()
		}
		if w&wantChunk != 0 {
			m.chunk = heap.NewChunk[*job[T]]()
		}
	}
	return m
}

// stock gives m to the index and the ready queue, each of which drops
// what it does not want (another call gave it first). The caller holds
// r.mu.
func (r *Router[T]) stock(m growthMem[T]) {
	if m.segment != nil {
		r.jobs.Give(m.segment)
	}
	if m.chunk != nil {
		r.ready.Give(m.chunk)
	}
}

// noteWants leaves word, for the next prealloc, of what the index and the
// ready queue want; the atomic is written only when that changes. The
// caller holds r.mu.
func (r *Router[T]) noteWants() {
	var w uint32
	if r.jobs.WantsSegment() {
		w |= wantSegment
	}
	if r.ready.WantsChunk() {
		w |= wantChunk
	}
	if w != r.growth.last {
		r.growth.last = w
		r.growth.want.Store(w)
	}
}
