package leaserouter

import (
	"fmt"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// Bulk actions: Retry, Cancel and Delete of many jobs at once, each job
// acted on only if it is still in one of the states the caller saw it in
// (an operator's "retry all dead" leaves alone a dead job someone retried
// meanwhile). pgrouter offers the same calls, each one round trip.

// MaxBulkIDs is the most IDs one RetryMany, CancelMany or DeleteMany
// takes, on every backend.
const MaxBulkIDs = 10000

// BulkResult is what RetryMany, CancelMany or DeleteMany did. Each
// distinct ID of the call is counted in exactly one field (an ID given
// twice is acted on and counted once), so the four add up to the number
// of distinct IDs when the call returns no error; after an error they
// count only the jobs the call looked at before it (an invalid ID is
// counted in NotFound only when the call returns no error), on every
// backend.
type BulkResult struct {
	// Done counts the jobs the action changed.
	Done int
	// Moved counts the jobs left alone because they were in none of the
	// states the call named: they moved since the caller saw them (a
	// worker leased a pending job, someone retried a dead one). Always 0
	// when the call names no states.
	Moved int
	// NotApplicable counts the jobs left alone because their state, one
	// the call named (or any, when it names none), is one the action does
	// not apply to: for RetryMany an unfinished job, for CancelMany a
	// finished one, for DeleteMany a leased one.
	NotApplicable int
	// NotFound counts the IDs that named no job: unknown, a finished job
	// past its Retention, or an ID ValidateID refuses.
	NotFound int
}

// The states each bulk action applies to (bit s: State s).
const (
	retryApplies  = 1<<StateSucceeded | 1<<StateDead | 1<<StateCanceled
	cancelApplies = 1<<StatePending | 1<<StateScheduled | 1<<StateLeased
	deleteApplies = (1<<numStates - 1) &^ (1 << StateLeased)
)

// bulkChunk bounds the jobs a bulk call acts on in one hold of the
// router's lock: a call of MaxBulkIDs takes many holds, settling what is
// due at each, so no other caller waits for the whole call.
const bulkChunk = 256

// RetryMany is Retry of each job of ids that is in one of states (empty:
// any) when the call comes to it: a finished job (succeeded, dead or
// canceled) is made pending again at once with a fresh attempt budget, in
// its place in the enqueue order, as Retry does (EventRetried,
// Stats.Retried). A job in none of states is left alone and counted in
// BulkResult.Moved; an unfinished one in NotApplicable; an unknown or
// invalid ID, or a finished job past its Retention, in NotFound.
//
// More than MaxBulkIDs IDs, or a state outside the State constants, is an
// error wrapping ErrInvalidOptions, and nothing changes. ErrClosed after
// Close. When Options.Capacity unfinished jobs are there, it stops at the
// job that would exceed it and returns what it did so far with an error
// wrapping ErrFull; the IDs after it are not looked at. The jobs are
// taken a bounded chunk at a time, each chunk in one hold of the router's
// lock after settling what is due, so a job is judged by its state at
// that instant, not at the call's start; a Close between chunks ends the
// call with what it did so far and ErrClosed. It waits for the router's
// lock, and while the event backlog is full (as Enqueue does). Safe for
// concurrent use.
func (r *Router[T]) RetryMany(ids []string, states []State) (BulkResult, error) {
	return r.bulk("RetryMany", retryApplies, ids, states)
}

// CancelMany is Cancel of each job of ids that is in one of states
// (empty: any) when the call comes to it: a pending, scheduled or leased
// job is canceled as Cancel cancels it (a leased job's lease is lost at
// once: its holder's next heartbeat is refused). A job in none of states
// is left alone and counted in BulkResult.Moved — a pending job a worker
// leased meanwhile keeps its lease when states is pending only —; a
// finished one in NotApplicable; an unknown or invalid ID, or a finished
// job past its Retention, in NotFound. Errors, chunks and blocking are
// RetryMany's (without ErrFull).
func (r *Router[T]) CancelMany(ids []string, states []State) (BulkResult, error) {
	return r.bulk("CancelMany", cancelApplies, ids, states)
}

// DeleteMany is Delete of each job of ids that is in one of states
// (empty: any) when the call comes to it: a job not leased is removed
// with its dedup record, as Delete removes it (EventPurged,
// Stats.Purged). A job in none of states is left alone and counted in
// BulkResult.Moved — a dead job someone retried meanwhile survives when
// states is dead only —; a leased one in NotApplicable; an unknown or
// invalid ID, or a finished job past its Retention, in NotFound. Errors,
// chunks and blocking are RetryMany's (without ErrFull).
func (r *Router[T]) DeleteMany(ids []string, states []State) (BulkResult, error) {
	return r.bulk("DeleteMany", deleteApplies, ids, states)
}

// bulk is a bulk action named call, on the jobs of ids in states, which
// acts on a job in a state of applies.
func (r *Router[T]) bulk(call string, applies uint8, ids []string, states []State) (BulkResult, error) {
	var res BulkResult
	given, err := contract.BulkStates(ErrInvalidOptions, call, len(ids), states, numStates)
	if err != nil {
		return res, err
	}
	// The invalid IDs are counted once the call has looked at every job:
	// after an error, the result counts only what the call got to.
	ids, invalid := contract.BulkIDs(ids, ValidateID)
	var fresh []*job[T] // RetryMany's new records, allocated before each hold
	for first := true; first || len(ids) > 0; first = false {
		chunk := ids[:min(len(ids), bulkChunk)]
		ids = ids[len(chunk):]
		if applies == retryApplies {
			fresh = fresh[:0]
			for range chunk {
				fresh = append(fresh, new(job[T]))
			}
		}
		now, err := r.lockOpen(true, nil)
		if err != nil {
			return res, err
		}
		for i, id := range chunk {
			j := r.jobs.Get(id)
			switch {
			case j == nil:
				res.NotFound++
				continue
			case given&(1<<j.state) == 0:
				res.Moved++
				continue
			case applies&(1<<j.state) == 0:
				res.NotApplicable++
				continue
			}
			switch applies {
			case retryApplies:
				if r.opts.Capacity > 0 && r.unfinished() >= r.opts.Capacity {
					r.unlockAndDeliver()
					return res, fmt.Errorf("%w: %d unfinished jobs; %s stopped with %d IDs not looked at",
						ErrFull, r.opts.Capacity, call, len(chunk)-i+len(ids))
				}
				r.retryLocked(j, fresh[i], now)
			case cancelApplies:
				r.cancel(j, now)
			default:
				r.deleteLocked(j, now)
			}
			res.Done++
		}
		r.unlockAndDeliver()
	}
	res.NotFound += invalid
	return res, nil
}
