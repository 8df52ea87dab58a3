package leaserouter

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/leaserouter/leaserouter/internal/contract"
	listcursor "github.com/leaserouter/leaserouter/internal/cursor"
)

// The operator's side: List, Retry, Delete, Pause and
// Resume, what a console or a CLI needs beyond Get, Cancel and Stats.
// pgrouter offers the same calls on PostgreSQL.

// ListParams selects the jobs of a List page.
type ListParams struct {
	// States keeps the jobs in one of these states; empty: every state.
	// A value outside the State constants is an error.
	States []State
	// IDPrefix keeps the jobs whose ID starts with it; empty: every ID.
	IDPrefix string
	// Kinds keeps the jobs of one of these kinds (Job.Kind; "" is a
	// Router's jobs); empty: every kind. A kind that is not valid UTF-8,
	// holds NUL or is longer than MaxIDBytes is an error.
	Kinds []string
	// Cursor is "" for the first page, else the NextCursor of the page
	// before, made with the same States, Kinds and IDPrefix (Limit may
	// change).
	Cursor string
	// Limit is the most jobs a page holds: 0 means DefaultListLimit, at
	// most MaxListLimit; more, or negative, is an error.
	Limit int
	// OmitPayload leaves out what a list that shows neither does not
	// need: the page's jobs carry a zero Payload, a nil Progress and nil
	// Errors, and none is read, so a page costs the same whatever the
	// size of payloads, checkpoints and error histories. Get returns a
	// job whole. A cursor stays
	// valid whether or not OmitPayload changes between pages.
	OmitPayload bool
}

// The bounds of ListParams.Limit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// JobPage is one page of List.
type JobPage[T any] struct {
	Jobs       []Job[T] // newest first (enqueue order, which Retry keeps), copies as Get returns them
	NextCursor string   // the cursor of the next page; "" on the last page
}

// listBudget bounds the slots of the enqueue order List looks at in one
// hold of the router's lock: a page whose filter matches few jobs is
// gathered over several holds, so no caller waits for a whole walk.
const listBudget = 4096

// List returns a page of the jobs p selects, newest first (by enqueue
// order), after settling what is due (a lease past its expiry is listed as
// the expiry left it; a finished job past its Retention is gone). Paging
// is keyset, not by offset: a cursor names the last job of its page, so
// following NextCursor never skips or repeats a job that stays selected
// meanwhile, however many jobs are enqueued, leased or dropped. A bad
// state, a Limit below 0 or above MaxListLimit, or a cursor that is
// malformed or was made under other States or IDPrefix is an error
// wrapping ErrInvalidOptions, naming it. List works after Close, on the
// state Close left. A page of many jobs, large checkpoints or large
// payloads never holds up lease operations for long: List reads the
// Router's state a bounded number of jobs at a time, and copies
// checkpoints outside those reads. The copies share nothing with the
// router except payloads of reference type. Safe for concurrent use.
func (r *Router[T]) List(p ListParams) (JobPage[T], error) {
	// It holds the router's lock for at most listBudget jobs looked at at
	// a time; a page whose filter matches few of many jobs takes several
	// holds (chunks of the order with no job of a selected state are
	// skipped whole, so a filter by state costs little even then). What a
	// hold copies does not grow with the size of checkpoints, which are
	// copied with the lock released, nor with that of payloads: a page of
	// a payload type larger than 64 bytes (an array, a large struct) is
	// copied over several holds, about 64 KiB of payload values each.
	var page JobPage[T]
	mask, limit, err := listFilter(p)
	if err != nil {
		return page, err
	}
	kindKey, err := contract.ListKinds(ErrInvalidOptions, p.Kinds)
	if err != nil {
		return page, err
	}
	var before uint64
	if p.Cursor != "" {
		if before, err = listcursor.Decode(p.Cursor, mask, p.IDPrefix+kindKey); err != nil {
			return page, fmt.Errorf("%w: ListParams.Cursor: %w", ErrInvalidOptions, err)
		}
	}
	var last uint64 // the seq of the page's last job
	// What a hold of the lock copies does not grow with payloads or
	// checkpoints: each job is copied as a row (no payload; its Progress
	// the record's checkpoint itself, copied once the lock is released),
	// and payload values, at most listCopyBytes of them per hold (but one
	// at least: the copy Enqueue and a grant make of one payload too), so
	// a large value type T takes more holds, not longer ones. The slices
	// grow before each hold, never under it.
	perHold := listPerHold[T]()
	if p.OmitPayload {
		perHold = MaxListLimit
	}
	var rows []jobRow
	var payloads []T
	for {
		rows = slices.Grow(rows, min(limit, len(rows)+perHold)-len(rows))
		if !p.OmitPayload {
			payloads = slices.Grow(payloads, min(limit, len(payloads)+perHold)-len(payloads))
		}
		r.lockSettled()
		full, copied := false, 0
		resume, more := r.order.Walk(before, mask, listBudget, func(j *job[T]) bool {
			if mask&(1<<j.state) == 0 || !strings.HasPrefix(j.id, p.IDPrefix) ||
				kindKey != "" && !slices.Contains(p.Kinds, r.kindName(j.kind)) {
				return true
			}
			if len(rows) == limit { // one more than the page: there is a next one
				full = true
				return false
			}
			rows = append(rows, r.row(j, !p.OmitPayload))
			if !p.OmitPayload {
				payloads = append(payloads, j.payload)
			}
			last = j.seq
			copied++
			return copied < perHold // else resume below j in the next hold
		})
		r.unlockAndDeliver()
		if full {
			page.NextCursor = listcursor.Encode(last, mask, p.IDPrefix+kindKey)
		}
		if full || !more {
			break
		}
		before = resume
		runtime.Gosched()
	}
	page.Jobs = make([]Job[T], len(rows))
	for i := range rows {
		var p T
		if payloads != nil {
			p = payloads[i]
		}
		page.Jobs[i] = withPayload(&rows[i], p)
	}
	return page, nil
}

// listCopyBytes bounds the bytes of payload values List copies in one
// hold of the router's lock.
const listCopyBytes = 64 << 10

// listPerHold is how many jobs List copies in one hold of the lock:
// MaxListLimit for payloads of up to 64 bytes (a string, a slice, a
// pointer or a small struct: one hold for a page), fewer for a larger
// value type, one at least.
func listPerHold[T any]() int {
	var zero T
	return min(MaxListLimit, max(1, listCopyBytes/max(1, int(unsafe.Sizeof(zero)))))
}

// listFilter checks p and returns its states as a mask (bit s: State s;
// every state if none) and its page size.
func listFilter(p ListParams) (mask uint8, limit int, err error) {
	return contract.ListFilter(ErrInvalidOptions, p.States, p.Limit, numStates)
}

// Retry makes a finished job (succeeded, dead or canceled) pending again
// at once, in its place in the enqueue order, with a fresh attempt budget:
// its next lease is attempt 1 of its MaxAttempts, with a token above every
// one issued before. Its LastError, Errors (the new attempts' records
// follow) and last checkpoint (Progress) stay.
// It emits EventRetried, counted in Stats.Retried, and wakes one blocked
// Acquire. It returns an error wrapping ErrNotFinished for a pending,
// scheduled or leased job, ErrNotFound for an unknown id (one
// ValidateID refuses wraps ErrInvalidJob too) or a finished job past its
// Retention, ErrFull when Options.Capacity unfinished jobs are already
// there, and ErrClosed after Close; in each case nothing changes.
func (r *Router[T]) Retry(id string) error {
	fresh := new(job[T]) // before the lock
	return r.onJob(id, func(j *job[T], now int64) error { return r.retryJob(j, now, fresh) })
}

// onJob runs do on the job id names, for Retry and Delete, under r.mu
// with what is due settled at now. It returns an error wrapping both
// ErrInvalidJob and ErrNotFound for an id ValidateID refuses, ErrClosed
// after Close, one wrapping ErrNotFound for an id the router does not
// know, else do's error.
func (r *Router[T]) onJob(id string, do func(j *job[T], now int64) error) error {
	if err := contract.CheckJobID(ErrInvalidJob, ErrNotFound, id); err != nil {
		return err
	}
	now, err := r.lockOpen(false, nil)
	if err != nil {
		return err
	}
	defer r.unlockAndDeliver()
	j := r.jobs.Get(id)
	if j == nil {
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return do(j, now)
}

// retryJob is Retry of j, a job the router knows, at now: it checks that
// j is finished and that Capacity has room, then retries it in fresh as
// retryLocked does. The caller holds r.mu and has settled at now. On
// error nothing changes.
func (r *Router[T]) retryJob(j *job[T], now int64, fresh *job[T]) error {
	switch {
	case !j.state.Terminal():
		return fmt.Errorf("%w: %q is %v", ErrNotFinished, j.id, j.state)
	case r.opts.Capacity > 0 && r.unfinished() >= r.opts.Capacity:
		return fmt.Errorf("%w: %d unfinished jobs", ErrFull, r.opts.Capacity)
	}
	r.retryLocked(j, fresh, now)
	return nil
}

// retryLocked makes j, a finished job, pending again as Retry does, in
// fresh, a zero record allocated before the lock, which takes j's place in
// the ID index and the enqueue order. j leaves the retention queue and is
// forgotten: a stale Lease still points at it, to be refused. The caller
// holds r.mu and has checked Capacity.
func (r *Router[T]) retryLocked(j, fresh *job[T], now int64) {
	// A finished job known to the router is retained (with Retention < 0
	// it would have been dropped when it finished).
	r.retained.Remove(int(j.heapIndex))
	*fresh = job[T]{id: j.id, payload: j.payload, progress: j.progress, fails: j.fails,
		hash: j.hash, token: j.token, seq: j.seq, priority: j.priority, created: j.created,
		updated: now, maxAttempts: j.maxAttempts, heapIndex: -1, state: j.state, timeout: j.timeout,
		meta: j.meta, kind: j.kind}
	r.jobs.Delete(j, j.hash)
	_, pos := r.jobs.Find(fresh.id, fresh.hash)
	r.jobs.Insert(fresh, fresh.hash, pos)
	r.order.Replace(j.orderChunk, j.seq, fresh)
	r.forget(j)
	r.stats.Retried++
	r.emit(EventRetried, now, fresh, nil, fresh.token, nil)
	r.makeReady(fresh, now)
}

// Delete removes a job that is not leased — pending, scheduled or
// finished — with its dedup record: its ID may be enqueued again at once.
// It emits EventPurged (Event.Time: now), counted in Stats.Purged. It
// returns an error wrapping ErrLeased for a leased job, naming its
// lease's fencing token and holder (Cancel it first),
// ErrNotFound for an unknown id (one ValidateID refuses wraps
// ErrInvalidJob too) or a finished job past its Retention, and ErrClosed
// after Close; in each case nothing changes.
func (r *Router[T]) Delete(id string) error { return r.onJob(id, r.deleteJob) }

// deleteJob is Delete of j, a job the router knows, at now: it refuses a
// leased job, else removes j as deleteLocked does. The caller holds r.mu
// and has settled at now. On error nothing changes.
func (r *Router[T]) deleteJob(j *job[T], now int64) error {
	if j.state == StateLeased {
		return contract.DeleteLeased(ErrLeased, j.id, uint64(j.token), j.owner())
	}
	r.deleteLocked(j, now)
	return nil
}

// deleteLocked removes j, a job not leased, from its state's queue (the
// retention queue for a finished job) and drops it. The caller holds r.mu.
func (r *Router[T]) deleteLocked(j *job[T], now int64) {
	switch j.state {
	case StatePending:
		r.ready.Remove(int(j.heapIndex))
	case StateScheduled:
		r.sched.Remove(int(j.heapIndex))
	default: // finished, so retained
		r.retained.Remove(int(j.heapIndex))
	}
	r.drop(j, now)
}

// Pause stops the granting of leases until Resume: Acquire and
// AcquireMany wait, TryAcquire and TryAcquireMany return ErrNoJob, Run's
// workers lease nothing more (the jobs they had leased before go on, as
// every lease held does). Everything else goes on: enqueues, heartbeats,
// completions, failures, expiries and the reaper. Stats.Paused says so.
// Pausing a paused Router changes nothing. It returns ErrClosed after
// Close (the Router grants nothing then anyway). It blocks only on the
// router's lock.
func (r *Router[T]) Pause() error { return r.setPaused(true) }

// Resume undoes Pause: leases are granted again, and as many blocked
// Acquire calls as there are ready jobs are woken at once. Resuming a
// Router that is not paused changes nothing. It returns ErrClosed after
// Close.
func (r *Router[T]) Resume() error { return r.setPaused(false) }

func (r *Router[T]) setPaused(paused bool) error {
	r.mu.Lock()
	defer r.unlockAndDeliver()
	if r.phase != phaseOpen {
		return ErrClosed
	}
	was := r.paused
	r.paused = paused
	if was && !paused {
		for range min(r.ready.Len(), len(r.waiters)) {
			r.wakeOne()
		}
	}
	return nil
}

// grantable is how many jobs could be leased now: the ready ones, or none
// while paused. The caller holds r.mu.
func (r *Router[T]) grantable() int {
	if r.paused {
		return 0
	}
	return r.ready.Len()
}

// Leases returns up to limit leased jobs, the lease expiring soonest
// first (the console's leases page), after settling what is due: holder
// (Owner), fencing token, LeaseExpiry, and UpdatedAt, the instant of the
// lease's grant or last accepted heartbeat. The jobs carry a zero Payload,
// a nil Progress and nil Errors, as List with OmitPayload: Get returns a job whole. limit 0 means
// DefaultListLimit; below 0 or above MaxListLimit is an error wrapping
// ErrInvalidOptions. It costs O(limit log limit) under the router's
// lock, however many leases there are, and works after Close (no lease
// survives Close: it returns none).
func (r *Router[T]) Leases(limit int) ([]Job[T], error) {
	limit, err := contract.LeasesLimit(ErrInvalidOptions, limit)
	if err != nil {
		return nil, err
	}
	// Rows (see List), grown before the lock, so what the hold copies
	// does not depend on T.
	rows := make([]jobRow, 0, limit)
	r.lockSettled()
	r.leases.Smallest(limit, func(j *job[T]) bool {
		rows = append(rows, r.row(j, false))
		return true
	})
	r.unlockAndDeliver()
	out := make([]Job[T], len(rows))
	var none T
	for i := range rows {
		out[i] = withPayload(&rows[i], none)
	}
	return out, nil
}
