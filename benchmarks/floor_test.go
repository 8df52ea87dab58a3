package benchmarks

// The in-process floor of a leased-job pipeline: the least any router
// with leaserouter's contract must do per job, written bare (no
// leaserouter code), run as BenchmarkPond and BenchmarkRouterEnqueue run
// (peerJobs no-op jobs, one producer, peerWorkers workers leasing while
// it enqueues), so its ratios to both are same-run:
//
//	cd benchmarks && go test -run '^$' -bench '^Benchmark(Pond|RouterEnqueue|PipelineFloor)$' -count 5
//
// Per job it does what the contract cannot skip: the ID rule (the core's
// own check), one mutex, a Go map by ID (dedup), a FIFO ready queue, a
// lease (a fencing token from one counter, the lease's deadline pushed
// into the reaper's deadline heap), a completion that checks the token,
// takes the deadline out of the heap and deletes the ID from the map
// (Retention -1). Every operation settles first, as the contract's do:
// a lease whose deadline has come is ended and its job made ready again
// (one comparison with the deadline heap's top while none is due), so a
// completion past the deadline is refused. Workers lease in batches as
// Run's do (twice the last batch, up to leaserouter.DefaultBatch, and at
// most the worker's share of the ready jobs with the other waiters),
// complete a batch under the lock that leases the next, and call the
// handler with a recover (contract.CallHandler); a worker with nothing
// ready waits on a sync.Cond, signalled by the producer only when one
// waits. Jobs live in a slab reused through a free list, the ready queue
// and the heap are of slab indexes, so nothing is allocated per job
// beyond the map's growth and the ID the producer makes. Left out,
// because a floor need not pay for them: events, statistics, attempts
// and retries (an expired job is simply ready again, an error ends a job
// as a success does), heartbeats, the reaper goroutine (nothing expires
// while the benchmark runs), a Run ctx (the handlers' parent is
// context.Background).

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// BenchmarkPipelineFloor: the floor queue (floorQueue) with peerWorkers
// workers while one goroutine enqueues every job, IDs made with
// strconv.Itoa as BenchmarkRouterEnqueue makes them; the operation ends
// when the last job is complete.
func BenchmarkPipelineFloor(b *testing.B) {
	pipeline(b, func() (int64, error) { return runFloor(peerJobs) })
}

// BenchmarkPipelineFloorLease: BenchmarkPipelineFloor with what
// leaserouter's Handler adds, which the bare floor leaves out: each job
// handed to the handler as a pointer to a lease object of its own
// (floorHandlerLease: a Lease's exported fields and what its methods
// need), because a handler may keep its *Lease after it returns and the
// lease's fields never change, so no lease can be reused for another
// job. The lease is also the handler's ctx, done when the lease ends
// (floorHandlerLease). The leases come in blocks allocated outside the
// lock, sized to the batch asked for as Run's are, with no lease left
// unused (floorLeases): about one lease allocated a job.
func BenchmarkPipelineFloorLease(b *testing.B) {
	pipeline(b, func() (int64, error) { return runFloorWith(peerJobs, true) })
}

// TestPipelineFloorRunsEveryJobOnce: every job is handled once, the
// queue ends empty (every lease completed, its deadline gone), and the
// floor keeps the contract's refusals (a bad ID, a duplicate, a stale
// token).
func TestPipelineFloorRunsEveryJobOnce(t *testing.T) {
	const n = 10_000
	for _, lease := range []bool{false, true} {
		got, err := runFloorWith(n, lease)
		require.NoError(t, err)
		require.EqualValues(t, n, got)
	}

	q := newFloorQueue()
	require.ErrorIs(t, q.enqueue("", 0), errFloorInvalid)
	require.ErrorIs(t, q.enqueue("a\x00", 0), errFloorInvalid)
	require.NoError(t, q.enqueue("a", 1))
	require.ErrorIs(t, q.enqueue("a", 1), errFloorDuplicate)
	into := make([]floorLease, 4)
	require.Equal(t, 1, q.step(nil, into))
	stale := into[0]
	stale.token++
	require.Equal(t, 1, q.complete([]floorLease{stale, into[0]}))
	require.Empty(t, q.byID)
	require.Empty(t, q.deadlines)
}

var (
	errFloorInvalid   = errors.New("floor: invalid job")
	errFloorDuplicate = errors.New("floor: duplicate")
)

// floorLeaseDuration is the floor's lease (leaserouter's default).
const floorLeaseDuration = int64(leaserouter.DefaultLeaseDuration)

// floorJob is a job in the slab.
type floorJob struct {
	id      string
	payload int
	token   uint64 // its lease's fencing token; 0 while pending
	pos     int32  // its deadline's index in the heap; -1 unless leased
}

// floorLease is what a worker holds: the job's slab index, its token,
// and the ID and payload the handler is given.
type floorLease struct {
	slot    int32
	token   uint64
	id      string
	payload int
}

// floorDeadline is a lease's entry in the deadline heap.
type floorDeadline struct {
	at   int64
	slot int32
}

// floorQueue is the floor router: everything under mu.
type floorQueue struct {
	mu        sync.Mutex
	wait      sync.Cond
	byID      map[string]int32
	jobs      []floorJob
	free      []int32
	ready     []int32 // a ring, len a power of two
	head, n   int
	deadlines []floorDeadline // a min-heap on at
	token     uint64
	waiting   int
	closed    bool
	start     time.Time
	// The Done channels handlers asked for, by slot (see
	// floorHandlerLease.Done); nil until one asks.
	watch map[int32]chan struct{}
}

func newFloorQueue() *floorQueue {
	q := &floorQueue{byID: map[string]int32{}, ready: make([]int32, 16), start: time.Now()}
	q.wait.L = &q.mu
	return q
}

// enqueue adds a pending job: the ID rule outside the lock, then the
// dedup lookup, a slab slot, the map insert and the ready push under it.
func (q *floorQueue) enqueue(id string, payload int) error {
	if err := contract.ValidateID(errFloorInvalid, id); err != nil {
		return err
	}
	q.mu.Lock()
	if _, ok := q.byID[id]; ok {
		q.mu.Unlock()
		return errFloorDuplicate
	}
	var slot int32
	if k := len(q.free); k > 0 {
		slot, q.free = q.free[k-1], q.free[:k-1]
	} else {
		slot = int32(len(q.jobs))
		q.jobs = append(q.jobs, floorJob{})
	}
	q.jobs[slot] = floorJob{id: id, payload: payload, pos: -1}
	q.byID[id] = slot
	if q.n == len(q.ready) {
		q.grow()
	}
	q.ready[(q.head+q.n)&(len(q.ready)-1)] = slot
	q.n++
	if q.waiting > 0 {
		q.wait.Signal()
	}
	q.mu.Unlock()
	return nil
}

// grow doubles the ready ring (amortised: the ring only grows).
func (q *floorQueue) grow() {
	r := make([]int32, 2*len(q.ready))
	for i := range q.n {
		r[i] = q.ready[(q.head+i)&(len(q.ready)-1)]
	}
	q.ready, q.head = r, 0
}

// step settles the leases due (see settle), completes done and leases
// into into the worker's share of the ready jobs, waiting while none is
// ready; 0 once closed and empty.
func (q *floorQueue) step(done, into []floorLease) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.settle()
	q.completeLocked(done)
	for q.n == 0 {
		if q.closed {
			return 0
		}
		q.waiting++
		q.wait.Wait()
		q.waiting--
		now = q.settle()
	}
	k := min(len(into), max(1, q.n/(1+q.waiting)))
	at := now + floorLeaseDuration
	for i := range k {
		slot := q.ready[q.head]
		q.head = (q.head + 1) & (len(q.ready) - 1)
		q.n--
		q.token++
		j := &q.jobs[slot]
		j.token = q.token
		q.push(floorDeadline{at, slot})
		into[i] = floorLease{slot, q.token, j.id, j.payload}
	}
	return k
}

// settle reads the clock and ends every lease whose deadline has come
// (at or before now), as the contract settles what is due before any
// operation: each such job goes back to the ready queue with no lease,
// so a completion with its old token is refused. While none is due it
// costs one comparison with the heap's top. It returns now.
func (q *floorQueue) settle() int64 {
	now := int64(time.Since(q.start))
	for len(q.deadlines) > 0 && q.deadlines[0].at <= now {
		slot := q.deadlines[0].slot
		q.remove(0)
		q.jobs[slot].token = 0
		q.lost(slot)
		if q.n == len(q.ready) {
			q.grow()
		}
		q.ready[(q.head+q.n)&(len(q.ready)-1)] = slot
		q.n++
		if q.waiting > 0 {
			q.wait.Signal()
		}
	}
	return now
}

// complete is completeLocked under the lock, after settle.
func (q *floorQueue) complete(done []floorLease) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.settle()
	return q.completeLocked(done)
}

// completeLocked ends the leases of done whose token is still their
// job's: the deadline out of the heap, the ID out of the map, the slot
// freed. It returns how many it ended. A lease past its deadline was
// ended by settle first (its job has no deadline in the heap), so it is
// refused as a stale one is.
func (q *floorQueue) completeLocked(done []floorLease) int {
	ended := 0
	for _, l := range done {
		j := &q.jobs[l.slot]
		if j.token != l.token || j.pos < 0 {
			continue // stale or expired: refused
		}
		q.remove(int(j.pos))
		q.lost(l.slot)
		delete(q.byID, j.id)
		*j = floorJob{pos: -1}
		q.free = append(q.free, l.slot)
		ended++
	}
	return ended
}

// lost closes the Done channel of the context of the lease on slot, if a
// handler asked for one (floorHandlerLease.Done): its lease has ended.
// With no context watched it costs one length check.
func (q *floorQueue) lost(slot int32) {
	if len(q.watch) == 0 {
		return
	}
	if c, ok := q.watch[slot]; ok {
		close(c)
		delete(q.watch, slot)
	}
}

// close wakes every waiting worker to end.
func (q *floorQueue) close() {
	q.mu.Lock()
	q.closed = true
	for slot := range q.watch {
		q.lost(slot)
	}
	q.wait.Broadcast()
	q.mu.Unlock()
}

// push, remove, up and down keep the deadline heap, each entry's index
// written into its job (pos) so a completion removes it in O(log n).
func (q *floorQueue) push(d floorDeadline) {
	q.deadlines = append(q.deadlines, d)
	q.up(len(q.deadlines) - 1)
}

func (q *floorQueue) remove(i int) {
	h := q.deadlines
	last := len(h) - 1
	q.jobs[h[i].slot].pos = -1
	if i != last {
		h[i] = h[last]
		q.jobs[h[i].slot].pos = int32(i)
	}
	q.deadlines = h[:last]
	if i != last {
		q.down(i)
		q.up(i)
	}
}

func (q *floorQueue) up(i int) {
	h := q.deadlines
	d := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= d.at {
			break
		}
		h[i] = h[p]
		q.jobs[h[i].slot].pos = int32(i)
		i = p
	}
	h[i] = d
	q.jobs[d.slot].pos = int32(i)
}

func (q *floorQueue) down(i int) {
	h := q.deadlines
	d := h[i]
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1].at < h[c].at {
			c++
		}
		if d.at <= h[c].at {
			break
		}
		h[i] = h[c]
		q.jobs[h[i].slot].pos = int32(i)
		i = c
	}
	h[i] = d
	q.jobs[d.slot].pos = int32(i)
}

// floorSink keeps the compiler from proving the handler's lease unused.
var floorSink atomic.Pointer[floorHandlerLease]

// runFloor is runFloorWith without a lease object per job.
func runFloor(n int) (int64, error) { return runFloorWith(n, false) }

// runFloorWith pushes n no-op jobs through a new floorQueue with
// peerWorkers workers while the calling goroutine enqueues them, and
// returns how many the handler ran. Each call of the handler is wrapped
// with a recover, as Run's (a panic is the job's error; the floor has no
// retries, so an error ends the job as a success does). With lease, each
// job reaches the handler as a *floorHandlerLease of its own, which is
// also its ctx; without, one reused per worker.
func runFloorWith(n int, lease bool) (int64, error) {
	q := newFloorQueue()
	var ran atomic.Int64
	handler := func(ctx context.Context, l *floorHandlerLease) error {
		if l.Token == 0 {
			floorSink.Store(l) // never: tokens start at 1
		}
		if ran.Add(1) == int64(n) {
			q.close()
		}
		return nil
	}
	var wg sync.WaitGroup
	for w := range peerWorkers {
		wg.Go(func() {
			into := make([]floorLease, leaserouter.DefaultBatch)
			done := make([]floorLease, 0, leaserouter.DefaultBatch)
			var leases floorLeases // not yet handed out
			got := 0
			workerID := "floor-" + strconv.Itoa(w)
			var bare floorHandlerLease
			for {
				// As Run's worker: ask for twice the last batch (up to
				// DefaultBatch), with that many leases in hand, a new
				// block allocated here, outside the lock, when those left
				// from earlier blocks are too few.
				want := min(len(into), max(1, 2*got))
				if lease {
					leases.have(want)
				}
				k := q.step(done, into[:want])
				if k == 0 {
					return
				}
				got = k
				done = done[:0]
				for _, l := range into[:k] {
					hl := &bare
					if lease {
						hl = leases.next()
					}
					*hl = floorHandlerLease{JobID: l.id, Payload: l.payload, Attempt: 1, Token: l.token,
						WorkerID: workerID, q: q, slot: l.slot}
					_ = contract.CallHandler(handler, context.Context(hl), hl) // an error ends the job too
					done = append(done, l)
				}
			}
		})
	}
	var err error
	for i := range n {
		if err = q.enqueue(strconv.Itoa(i), i); err != nil {
			q.close()
			break
		}
	}
	wg.Wait()
	if err == nil && (len(q.byID) != 0 || len(q.deadlines) != 0) {
		err = errors.New("floor: jobs left unfinished")
	}
	return ran.Load(), err
}
