package leaserouter

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// Batches: many jobs enqueued, or many leases granted, under one lock and
// one clock reading, as a ClaimMany and River's InsertMany do, so
// the per-call cost of the lock and the clock is paid once per batch.

// EnqueueMany enqueues jobs in slice order, as that many Enqueue calls
// would at one instant, under one lock. IDs the router knows, or that
// repeat an earlier ID of the batch, are skipped as duplicates (counted in
// Stats.Duplicates, an EventDuplicate each) and their indexes returned in
// order; the rest are enqueued, with the events Enqueue emits, in order.
// All or nothing: an invalid job (an ID ValidateID refuses or a bad
// option: the error wraps ErrInvalidJob, names the problem and the job's
// batch index, as "(batch index i)"), new jobs that would exceed
// Options.Capacity (ErrFull) or a closed router (ErrClosed) return the
// error and enqueue nothing, count nothing. An empty or nil batch
// enqueues nothing and returns nil, nil. It blocks like Enqueue: on the
// router's lock and, with a hook set, while the event backlog is full.
// jobs is not retained.
func (r *Router[T]) EnqueueMany(jobs []JobSpec[T]) (duplicates []int, err error) {
	return r.enqueueMany(jobs, 0, nil)
}

// enqueueMany is EnqueueMany of jobs of kind, waiting for room as
// enqueue does until done is closed.
func (r *Router[T]) enqueueMany(jobs []JobSpec[T], kind uint16, done <-chan struct{}) (duplicates []int, err error) {
	pooled := specPool.Get().(*[]enqueueSpec)
	defer func() {
		clear(*pooled)
		if cap(*pooled) <= maxPooledSpecs { // a huge batch's specs go to the GC
			specPool.Put(pooled)
		}
	}()
	specs := slices.Grow((*pooled)[:0], len(jobs))[:len(jobs)]
	*pooled = specs
	for i := range jobs {
		if err = r.parseJob(&specs[i], jobs[i].ID, jobs[i].Options); err != nil {
			return nil, contract.AtBatchIndex(err, i)
		}
		specs[i].kind = kind
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	// The batch's records, allocated before taking the lock; a job with
	// metadata has one of its own (ownRecords).
	records := makeBlocks[job[T]](len(jobs))
	own := ownRecords[T](specs)
	growth := r.prealloc() // the same, for the index and the ready queue (reserve.go)
	now, err := r.lockOpen(true, done)
	if err != nil {
		return nil, err
	}
	r.stock(growth)
	if c := r.opts.Capacity; c > 0 {
		if fresh := r.freshJobs(jobs, specs); r.unfinished()+fresh > c {
			r.unlockAndDeliver()
			return nil, fmt.Errorf("%w: %d unfinished jobs, %d more in the batch", ErrFull, r.unfinished(), fresh)
		}
	}
	// Inserting in order makes an ID repeated within the batch a known one
	// by the time it comes again.
	for i := range jobs {
		id := jobs[i].ID
		known, pos := r.jobs.Find(id, specs[i].hash)
		if known != nil { // known before the batch, or repeated within it
			duplicates = append(duplicates, i)
			r.duplicate(id, specs[i].kind, known, now)
			continue
		}
		rec := records.at(i)
		if own != nil && own[i] != nil {
			rec = own[i]
		}
		r.insert(id, jobs[i].Payload, &specs[i], pos, now, rec)
	}
	r.noteWants()
	r.unlockAndDeliver()
	return duplicates, nil
}

// allocBlock is how many records or leases a batch allocates at once.
// One allocation per value costs a batch a malloc each; one per batch
// lets a single long-lived job (or lease) keep its whole batch's memory,
// payloads included, long after the rest is gone. Blocks of 8 cost an
// eighth of the mallocs and pin at most 7 dead values (without payload or
// ID: purge clears them) per survivor, so a burst of batches whose every
// 256th job lives on gives back all but a few percent of its memory (see
// TestMemoryReturnsAfterBatchedBurst).
const allocBlock = 8

// ownRecords returns, for a batch with metadata, a record of its own for
// each job that has some (nil for the others), nil for a batch without.
// forget clears a purged record but keeps its metadata (a stale Lease may
// still read it, without the lock), so a record in a block would let any
// survivor of the block keep its dead neighbours' metadata maps.
func ownRecords[T any](specs []enqueueSpec) []*job[T] {
	var own []*job[T]
	for i := range specs {
		if specs[i].Metadata != nil {
			if own == nil {
				own = make([]*job[T], len(specs))
			}
			own[i] = new(job[T])
		}
	}
	return own
}

// blocks holds n values in blocks of allocBlock.
type blocks[E any] [][]E

func makeBlocks[E any](n int) blocks[E] {
	bs := make(blocks[E], (n+allocBlock-1)/allocBlock)
	for i := range bs {
		bs[i] = make([]E, min(allocBlock, n-i*allocBlock))
	}
	return bs
}

// at returns the i-th value.
func (bs blocks[E]) at(i int) *E { return &bs[i/allocBlock][i%allocBlock] }

// specPool holds the parsed specs of EnqueueMany's batches, needed only
// while the call lasts, so a steady stream of batches allocates none.
var specPool = sync.Pool{New: func() any { return new([]enqueueSpec) }}

// maxPooledSpecs bounds the specs kept in specPool (64 bytes each), so the
// pool never holds a huge batch's memory after it.
const maxPooledSpecs = 4096

// TryAcquireMany leases up to max ready jobs to workerID, in the order
// TryAcquire would hand them out, under one lock and one clock reading.
// Each lease is independent: its own token (increasing in slice order),
// expiry, heartbeats and completion. It returns the leases (at least one),
// or ErrNoJob if none is ready, ErrTokensExhausted if tokens ran out before
// the first, ErrClosed after Close, and an error wrapping ErrInvalidOptions
// for max < 1 or a workerID that breaks the rule for IDs (see MaxIDBytes;
// "" is allowed). It waits like TryAcquire (see there).
func (r *Router[T]) TryAcquireMany(workerID string, max int) ([]*Lease[T], error) {
	if err := contract.ClaimMax(ErrInvalidOptions, "TryAcquireMany", max); err != nil {
		return nil, err
	}
	if err := contract.ValidateWorkerID(ErrInvalidOptions, workerID); err != nil {
		return nil, err
	}
	now, err := r.lockOpen(true, nil)
	if err != nil {
		return nil, err
	}
	ls, err := r.grantMany(workerID, now, max)
	r.unlockAndDeliver()
	for _, l := range ls {
		l.ownProgress()
	}
	return ls, err
}

// AcquireMany leases up to max ready jobs as TryAcquireMany does, blocking
// as Acquire does until at least one is ready: it returns ctx.Err() if ctx
// is done first and ErrClosed after Close (or when Close starts while it
// waits); max < 1 or a workerID that breaks the rule for IDs (see
// MaxIDBytes) is an error
// wrapping ErrInvalidOptions, at once. A nil ctx means
// context.Background().
func (r *Router[T]) AcquireMany(ctx context.Context, workerID string, max int) ([]*Lease[T], error) {
	if err := contract.ClaimMax(ErrInvalidOptions, "AcquireMany", max); err != nil {
		return nil, err
	}
	if err := contract.ValidateWorkerID(ErrInvalidOptions, workerID); err != nil {
		return nil, err
	}
	var ls []*Lease[T]
	err := r.await(ctx, func(now int64) (err error) {
		ls, err = r.grantMany(workerID, now, max)
		return err
	})
	for _, l := range ls {
		l.ownProgress()
	}
	return ls, err
}

// grantMany grants up to max leases in order, stopping at the first
// ErrNoJob or ErrTokensExhausted: that error only if it granted none. The
// caller holds r.mu and has settled.
func (r *Router[T]) grantMany(workerID string, now int64, max int) ([]*Lease[T], error) {
	n := r.roomFor(min(max, r.grantable())) // 0 ready: 1, for the error
	block := makeBlocks[Lease[T]](n)
	ls := make([]*Lease[T], n)
	for i := range ls {
		ls[i] = block.at(i)
	}
	k, err := r.grantInto(workerID, now, ls, nil)
	return ls[:k], err
}

// roomFor limits a batch of n grants, each adding an event, to the room
// left in the event backlog, and to at least one, so that a batch cannot
// carry the backlog far past its bound (see Options.OnEvent). The caller
// holds r.mu.
func (r *Router[T]) roomFor(n int) int {
	if r.hooked {
		n = min(n, eventBacklog-r.backlog())
	}
	return max(1, n)
}

// warmAbove is the number of jobs from which a batch warms the caches
// first (grantInto, completeMany): about where the job records and the
// ID index outgrow the CPU's caches.
const warmAbove = 1 << 14

// grantInto grants up to len(into) leases in order, into the Leases given
// (zero, or set up for Run by its caller), and returns how many it granted,
// stopping at the first ErrNoJob or ErrTokensExhausted: that error only if
// it granted none. A non-nil ready (as long as into) gets how each job was
// ready before its lease (Run keeps it, for handBack). The caller holds
// r.mu and has settled.
func (r *Router[T]) grantInto(workerID string, now int64, into []*Lease[T], ready []readyAt) (int, error) {
	// The jobs about to be leased were enqueued long ago, so their records
	// are likely out of the CPU's caches: reading them all first, in a
	// loop whose loads do not depend on each other, overlaps those misses
	// instead of paying them one after another in grant.
	if r.ready.Len() >= warmAbove { // below, all in the caches
		for i := range into {
			if j := r.ready.Upcoming(i); j != nil {
				r.cacheWarmSink += uint64(len(j.id)) ^ uint64(j.token) ^ uint64(j.at) ^ uint64(j.state)
			}
		}
	}
	for i := range into {
		var was *readyAt
		if ready != nil {
			was = &ready[i]
		}
		if _, err := r.grant(workerID, now, into[i], was); err != nil {
			if i > 0 {
				return i, nil
			}
			return 0, err
		}
	}
	return len(into), nil
}

// completeMany completes each lease of ls that is still valid, as that
// many Complete calls would at one instant; a lease no longer valid is
// refused as Complete would refuse it (a stale_rejected event, counted).
// The caller holds r.mu and has settled at now.
func (r *Router[T]) completeMany(ls []*Lease[T], now int64) {
	// Completing drops finished jobs from the ID index when Retention < 0:
	// touch their slots first, so the cache misses overlap (see grantInto).
	if r.opts.Retention < 0 && r.jobs.Len() >= warmAbove {
		for _, l := range ls {
			r.cacheWarmSink += r.jobs.Touch(l.j.hash)
		}
	}
	for _, l := range ls {
		if j, err := r.holding(l, now); err == nil {
			r.complete(j, l, now)
		}
	}
}

// freshJobs counts the jobs of a batch that would be enqueued (neither
// known nor repeating an earlier ID of the batch), changing nothing, for
// the capacity check that refuses the whole batch or none of it. The caller
// holds r.mu.
func (r *Router[T]) freshJobs(jobs []JobSpec[T], specs []enqueueSpec) int {
	seen := make(map[string]struct{}, len(jobs))
	fresh := 0
	for i := range jobs {
		id := jobs[i].ID
		if _, ok := seen[id]; ok {
			continue
		}
		seen[id] = struct{}{}
		if known, _ := r.jobs.Find(id, specs[i].hash); known == nil {
			fresh++
		}
	}
	return fresh
}
