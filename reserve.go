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
// TryAcquire and Acquire allocate their Lease before taking the lock, and
// EnqueueMany and the batch grants one block of records or leases per
// allocBlock of them.
//
// Enqueue's job records come in blocks too, one malloc for seven jobs
// instead of one each: the Router keeps the rest of the block it takes
// records from (recs) and one whole block in reserve (recBlock), and an
// Enqueue allocates the next reserve before it takes the lock when an
// earlier call left word that the reserve was taken. A record is taken
// from a block only by an Enqueue that stores its job (a duplicate takes
// none), so every record of a block is used, and a block lives while any
// of its jobs does: purge clears a record's ID, payload and checkpoint
// (forget), so a long-lived job pins at most six dead records of about
// 160 bytes, as a batch's (allocBlock) pins seven.

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
	wantRecords             // Enqueue wants a block of job records (recBlock is empty)
)

// growthMem is memory allocated before the lock for the next growth step
// of the ID index and the ready queue; nil where none was wanted.
type growthMem[T any] struct {
	segment *table.Segment[job[T]]
	chunk   *heap.Chunk[*job[T]]
	records *[recordBlock]job[T]
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
		if w&wantRecords != 0 {
			m.records = new([recordBlock]job[T])
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
	if m.records != nil && r.recBlock == nil {
		r.recBlock = m.records
	}
	if m.segment != nil || m.chunk != nil || m.records != nil {
		// The word asked for these: take it back now, or every call
		// refused before its noteWants (a duplicate, ErrFull) would
		// allocate them again, to be dropped.
		r.noteWants()
	}
}

// recordBlock is how many job records an Enqueue block holds. Blocks
// above 512 bytes carry an 8-byte header and take the allocator's size
// class above them: 7 records of 160 bytes (a Router[int]'s, or of any
// one-word payload) fill the 1152-byte class, costing each job 3.4 bytes
// more than a record of its own; 8 would take the 1408-byte class, 16
// bytes more a job.
const recordBlock = 7

// newRecord returns a zero job record for Enqueue's new job: the next of
// the block it takes records from, or the first of the reserve block; a
// new one, under the lock, only when several Enqueues that found no word
// of a wanted block emptied both (or at the first Enqueue of all). The
// caller holds r.mu and stores the job.
func (r *Router[T]) newRecord() *job[T] {
	if len(r.recs) == 0 {
		if r.recBlock == nil {
			return new(job[T])
		}
		r.recs, r.recBlock = r.recBlock[:], nil
	}
	j := &r.recs[0]
	r.recs = r.recs[1:]
	return j
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
	if r.recBlock == nil {
		w |= wantRecords
	}
	if w != r.growth.last {
		r.growth.last = w
		r.growth.want.Store(w)
	}
}
