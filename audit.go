package leaserouter

import (
	"errors"
	"fmt"
)

// Audit: every internal invariant of a Router, checked in O(n).

// Audit checks every internal invariant of the Router and returns an error
// describing each violation (errors.Join), or nil. It checks the one
// invariant — a job has at most one lease and it is its current one — and
// the bookkeeping behind it: per-state counts, each heap's order and
// membership, lease and token fields, the retention queue's order and
// membership, that only current leases have KeepAlive heartbeats
// scheduled, and that no deadline is missed by the check every call
// makes first. It is
// O(n) under the lock: for tests and operators, not for hot paths. It does
// not settle anything and works after Close.
func (r *Router[T]) Audit() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("leaserouter: audit: "+format, args...))
	}
	var counts [numStates]int
	if !r.jobs.Valid() {
		bad("the job index is corrupt")
	}
	for j := range r.jobs.All() {
		id := j.id
		if j.state >= numStates {
			bad("job %q has invalid state %d", id, j.state)
			continue
		}
		counts[j.state]++
		if j.orderChunk == nil || !j.orderChunk.Holds(j.seq, j) {
			bad("job %q is not at its place in the enqueue order", id)
		}
		if j.token > r.lastToken {
			bad("job %q has token %d above the last issued %d", id, j.token, r.lastToken)
		}
		if j.attempt > j.maxAttempts || j.attempt < 0 {
			bad("job %q has attempt %d of max %d", id, j.attempt, j.maxAttempts)
		}
		leased := j.state == StateLeased
		if leased != (j.lease != nil) {
			bad("job %q in state %v has lease %v", id, j.state, j.lease != nil)
		}
		if leased && (j.lease.j != j || j.lease.Token != j.token || j.attempt < 1) {
			bad("job %q's lease does not match it (token %d vs %d)", id, j.lease.Token, j.token)
		}
		i := int(j.heapIndex)
		var at bool // j is at position i of its state's index
		switch j.state {
		case StatePending:
			at = r.ready.Contains(i) && r.ready.At(i) == j
		case StateScheduled:
			at = i >= 0 && i < r.sched.Len() && r.sched.At(i) == j
		case StateLeased:
			at = r.leases.Contains(i) && r.leases.At(i) == j
		default: // finished: retained (Retention < 0 drops it when it finishes)
			at = r.retained.Contains(i) && r.retained.At(i) == j
		}
		if !at {
			bad("job %q in state %v is not at its position %d", id, j.state, i)
		}
	}
	for s := range numStates {
		if counts[s] != r.counts[s] {
			bad("%v count is %d, but %d jobs are %v", s, r.counts[s], counts[s], s)
		}
	}
	idx := func(j *job[T]) int { return int(j.heapIndex) }
	if !r.ready.Valid(idx) || !r.sched.Valid(idx) || !r.leases.Valid(idx) || !r.retained.Valid(idx) {
		bad("a heap or the retention queue is out of order or has stale positions")
	}
	if n := r.ready.Len() + r.sched.Len() + r.leases.Len(); n != r.unfinished() {
		bad("heaps hold %d jobs, but %d are unfinished", n, r.unfinished())
	}
	if r.order.Len() != r.jobs.Len() {
		bad("the enqueue order holds %d jobs, the ID index %d", r.order.Len(), r.jobs.Len())
	}
	if n, want := r.retained.Len(), counts[StateSucceeded]+counts[StateDead]+counts[StateCanceled]; n != want {
		bad("retention queue holds %d jobs, but %d are finished", n, want)
	}
	if !r.kept.Valid(func(k *keeper[T]) int { return int(k.keptIndex) }) {
		bad("KeepAlive's heartbeat schedule is out of order or has stale positions")
	}
	for i := range r.kept.Len() {
		if k := r.kept.At(i); k.l.j.state != StateLeased || k.l.j.lease != k.l {
			bad("a KeepAlive of job %q (token %d) is scheduled, but its lease is not the job's current one", k.l.JobID, k.l.Token)
		}
	}
	if t, ok := r.leases.Peek(); ok && t.at < r.due {
		bad("lease expiry %d is before settle's bound %d", t.at, r.due)
	}
	if t, ok := r.sched.Peek(); ok && t.at < r.due {
		bad("run-at %d is before settle's bound %d", t.at, r.due)
	}
	if t, ok := r.retained.Peek(); ok && t.at < r.due {
		bad("retention end %d is before settle's bound %d", t.at, r.due)
	}
	if k, ok := r.kept.Peek(); ok && k.next < r.due {
		bad("KeepAlive heartbeat %d is before settle's bound %d", k.next, r.due)
	}
	if r.phase == phaseClosed && r.leases.Len() > 0 {
		bad("%d leases survive Close", r.leases.Len())
	}
	return errors.Join(errs...)
}
