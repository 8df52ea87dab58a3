package leaserouter

import (
	"math"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/hook"
)

// SetHooks installs test signals on r (nil removes them).
func SetHooks[T any](r *Router[T], h *hook.Hooks) { r.hooks.Store(h) }

// ExpireNow makes the lease of job id expire at the current instant, as
// if its expiry had been now, and settles it. It reports whether the job
// was leased.
func ExpireNow[T any](r *Router[T], id string) bool {
	r.mu.Lock()
	j := r.jobs.Get(id)
	ok := j != nil && j.state == StateLeased && r.phase != phaseClosed
	if ok {
		now := r.now()
		r.leases.Remove(int(j.heapIndex))
		j.at = now
		r.leases.Push(j)
		r.noteDue(now)
		r.settle(now, -1)
	}
	r.unlockAndDeliver()
	return ok
}

// EventBacklog is the bound on undelivered events that makes producers of
// new work wait.
const EventBacklog = eventBacklog

// Backlog returns the number of events recorded and not yet delivered.
func Backlog[T any](r *Router[T]) int {
	if r.delivery == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.backlog()
}

// MaxShared bounds the finished leases of Run's earlier batches that a
// later batch's block keeps alive.
const MaxShared = maxShared

// ProgressEvery is how many events the delivery goroutine delivers between
// reports of its progress.
const ProgressEvery = contract.ProgressEvery

// KeptIntervals returns the intervals at which KeepAlive keeps l alive,
// one per KeepAlive call still keeping it, in the order of the calls
// (read-only: for the conformance row on KeepAlive's interval).
func KeptIntervals[T any](l *Lease[T]) []time.Duration {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	var ws []lostWatcher
	switch cur := l.lost.(type) {
	case nil:
	case lostWatchers:
		ws = cur
	default:
		ws = []lostWatcher{cur}
	}
	var out []time.Duration
	for _, w := range ws {
		if k, ok := w.(*keeper[T]); ok {
			out = append(out, k.interval)
		}
	}
	return out
}

// LockFree reports whether r's lock is free now (TryLock): called from
// user code the Router runs, it tells whether that code runs under the
// lock. Meaningful only when no other goroutine may hold the lock at that
// instant (in a synctest bubble where every other goroutine is asleep).
func LockFree[T any](r *Router[T]) bool {
	if !r.mu.TryLock() {
		return false
	}
	r.mu.Unlock()
	return true
}

// KeepAliveQuitting reports whether a cancel func of a KeepAlive keeping l
// has been called (read-only). It reads l's watchers without the lock:
// call it only while no call can change them (the router's lock held
// elsewhere, after the KeepAlive was made in the calling goroutine).
func KeepAliveQuitting[T any](l *Lease[T]) bool {
	ws, ok := l.lost.(lostWatchers)
	if !ok {
		ws = lostWatchers{l.lost}
	}
	for _, w := range ws {
		if k, ok := w.(*keeper[T]); ok && k.quit.Load() != math.MaxInt64 {
			return true
		}
	}
	return false
}
