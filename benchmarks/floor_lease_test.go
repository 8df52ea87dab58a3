package benchmarks

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// floorHandlerLease is the lease object BenchmarkPipelineFloorLease
// hands its handler: leaserouter.Lease's exported fields, the queue and
// the job's slot its methods would act on. It is also the handler's
// context (canceled when the lease ends), at no cost per job beyond the
// lease: the queue already knows whether the lease is live (its token is
// still its job's and its deadline still in the heap), so a handler's
// context needs no state of its own until a handler asks for Done, and
// the one that asks pays for it (a channel registered with the queue).
// A context of its own per job, as Run's, would add words to every lease
// that nearly no handler reads.
type floorHandlerLease struct {
	JobID    string
	Payload  int
	Attempt  int
	Token    uint64
	WorkerID string
	Progress []byte
	q        *floorQueue
	slot     int32
}

// live reports whether l is still its job's lease; q.mu held.
func (l *floorHandlerLease) live() bool {
	j := &l.q.jobs[l.slot]
	return j.token == l.Token && j.pos >= 0
}

// Deadline: none (a lease's deadline moves with heartbeats; the floor's
// handlers have no parent but context.Background).
func (l *floorHandlerLease) Deadline() (time.Time, bool) { return time.Time{}, false }

// Value: the parent's (context.Background).
func (l *floorHandlerLease) Value(any) any { return nil }

// Done returns a channel closed when the lease ends (completed, expired,
// or the queue closed).
func (l *floorHandlerLease) Done() <-chan struct{} {
	q := l.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !l.live() {
		return floorClosed
	}
	c, ok := q.watch[l.slot]
	if !ok {
		if q.watch == nil {
			q.watch = map[int32]chan struct{}{}
		}
		c = make(chan struct{})
		q.watch[l.slot] = c
	}
	return c
}

// Err is context.Canceled once the lease has ended, nil before.
func (l *floorHandlerLease) Err() error {
	q := l.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !l.live() {
		return context.Canceled
	}
	return nil
}

var _ context.Context = (*floorHandlerLease)(nil)

// floorClosed is the Done channel of an ended lease.
var floorClosed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// floorLeases are a worker's leases not yet handed out, in the blocks
// they were allocated in, oldest first. A batch may take the end of one
// block and the start of the next, so no lease is allocated and left
// unused (Run's worker never splits a batch over blocks, and drops the
// rest of a block too short for the next batch).
type floorLeases struct {
	blocks [][]floorHandlerLease // each non-empty
	n      int                   // leases in blocks
}

// have makes sure at least want leases are in hand.
func (f *floorLeases) have(want int) {
	if f.n < want {
		b := floorLeaseBlock(want)
		f.blocks = append(f.blocks, b)
		f.n += len(b)
	}
}

// next hands out the oldest lease in hand; there must be one.
func (f *floorLeases) next() *floorHandlerLease {
	b := f.blocks[0]
	l := &b[0]
	if len(b) > 1 {
		f.blocks[0] = b[1:]
	} else {
		f.blocks[0] = nil
		f.blocks = append(f.blocks[:0], f.blocks[1:]...)
	}
	f.n--
	return l
}

// floorLeaseBlock returns a new block of at least want leases (all of
// its allocation: the allocator rounds its size up).
func floorLeaseBlock(want int) []floorHandlerLease {
	b := slices.Grow([]floorHandlerLease(nil), want)
	floorLeasesAllocated.Add(int64(cap(b)))
	return b[:cap(b)]
}

// floorLeasesAllocated counts the leases floorLeaseBlock allocates (one
// atomic add a block, not a job), for
// TestPipelineFloorLeaseAllocatesAboutOneLeasePerJob.
var floorLeasesAllocated atomic.Int64

// TestPipelineFloorLeaseAllocatesAboutOneLeasePerJob: the floor with a
// lease per job allocates about one lease per job, in blocks allocated
// outside the lock for batches of twice the last (as Run's worker asks
// for them), the leases left in a block kept for the next batches, not a
// block of DefaultBatch leases per batch whatever the batch's size (3.7
// leases a job). It counts the leases floorLeaseBlock allocates (a
// memory profile's bytes are doubled under -race).
func TestPipelineFloorLeaseAllocatesAboutOneLeasePerJob(t *testing.T) {
	const n = 200_000
	before := floorLeasesAllocated.Load()
	got, err := runFloorWith(n, true)
	require.NoError(t, err)
	require.EqualValues(t, n, got)
	perJob := float64(floorLeasesAllocated.Load()-before) / n
	t.Logf("%.3f leases allocated a job, %.0f B each", perJob, float64(unsafe.Sizeof(floorHandlerLease{})))
	require.LessOrEqual(t, perJob, 1.25, "the floor allocates %.2f leases a job", perJob)
}

// TestPipelineFloorRefusesACompletionPastTheDeadline: as the contract,
// the floor refuses a completion once the lease's deadline has passed
// (settling what is due before every operation), whether or not a reaper
// ran, and the job is ready again, its lease's context done.
func TestPipelineFloorRefusesACompletionPastTheDeadline(t *testing.T) {
	q := newFloorQueue()
	require.NoError(t, q.enqueue("a", 1))
	into := make([]floorLease, 1)
	require.Equal(t, 1, q.step(nil, into))
	// The lease's duration and then some pass (the floor's clock is
	// time.Since(q.start)).
	q.mu.Lock()
	q.start = q.start.Add(-2 * time.Duration(floorLeaseDuration))
	q.mu.Unlock()
	require.Zero(t, q.complete(into), "the floor completed a lease %v past its deadline", time.Duration(floorLeaseDuration))
	require.Equal(t, 1, q.n, "the expired job is ready again")
}

// TestPipelineFloorLeaseContextEndsWithItsLease: the lease a handler is
// given is its context, live while the lease is, done once it ends
// (completed or expired), with a Done channel asked for before or after.
func TestPipelineFloorLeaseContextEndsWithItsLease(t *testing.T) {
	q := newFloorQueue()
	require.NoError(t, q.enqueue("a", 1))
	require.NoError(t, q.enqueue("b", 2))
	into := make([]floorLease, 2)
	require.Equal(t, 2, q.step(nil, into))
	ctxs := make([]*floorHandlerLease, 2)
	for i, l := range into {
		ctxs[i] = &floorHandlerLease{JobID: l.id, Token: l.token, q: q, slot: l.slot}
		require.NoError(t, ctxs[i].Err())
	}
	done := ctxs[0].Done()
	require.Equal(t, 1, q.complete(into[:1]))
	require.ErrorIs(t, ctxs[0].Err(), context.Canceled)
	<-done
	<-ctxs[0].Done()
	require.NoError(t, ctxs[1].Err())
	expired := ctxs[1].Done()
	q.mu.Lock()
	q.start = q.start.Add(-2 * time.Duration(floorLeaseDuration))
	q.mu.Unlock()
	require.Zero(t, q.complete(into[1:]))
	<-expired
	require.ErrorIs(t, ctxs[1].Err(), context.Canceled)
	require.Empty(t, q.watch)
}
