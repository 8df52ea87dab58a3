package leaserouter

import (
	"cmp"
	"iter"
	"time"
)

// Stats: counts by state and totals since New.

// Stats is a point-in-time view of a Router: jobs in each state now
// (finished ones while retained), and totals since New. Router.Stats
// returns one; ByState iterates the per-state counts.
type Stats struct {
	Pending   int // jobs ready to be leased
	Scheduled int // jobs waiting for their run-at (delay or retry backoff)
	Leased    int // jobs held under a lease
	Succeeded int // completed jobs, while retained
	DeadJobs  int // jobs in StateDead now (no attempts left, or a Permanent error), while retained; Dead below is a total since New
	Canceled  int // canceled jobs, while retained
	// Failed is DeadJobs under its former name, filled with the same
	// value for one release.
	//
	// Deprecated: use DeadJobs. "Failed" names one failed attempt
	// (EventFailed); a job with no attempts left is dead.
	Failed int

	Enqueued          uint64 // jobs accepted by Enqueue
	Duplicates        uint64 // Enqueue calls refused with ErrDuplicate
	LeasesGranted     uint64 // leases granted: attempts started, and leases Run handed back unstarted (see Run)
	Heartbeats        uint64 // heartbeats accepted
	HeartbeatsRefused uint64 // heartbeats refused because the lease was lost (also counted in StaleRejections)
	Expirations       uint64 // leases that expired
	Retries           uint64 // jobs scheduled again by Fail (EventRetryScheduled)
	Dead              uint64 // jobs that reached StateDead since New (EventDead), a total; DeadJobs counts those dead now; not EventFailed, which is one failed attempt
	StaleRejections   uint64 // lease operations refused because the lease was lost
	Purged            uint64 // jobs dropped: finished ones at once or after Retention, and those Router.Delete removed
	Retried           uint64 // finished jobs made pending again by Router.Retry (EventRetried)
	Snoozed           uint64 // leases ended by Lease.Snooze or a Run handler's Snooze error (EventSnoozed)
	CallbackPanics    uint64 // panics recovered from Backoff, OnEvent, the Logger's handler, and a periodic job's Schedule.Next and Payload

	// ReadySince is when the job first in the ready order (the next a
	// lease would take: highest priority, then earliest ready, then
	// enqueue order) became ready: the queue's latency is the time since
	// (with one priority, the age of the oldest pending job). A job's
	// ready time is its enqueue time, its run-at, or the instant it was
	// pending again (an expired or released lease, Retry, RunNow). The
	// zero Time when no job is pending. An instant, not a duration, so
	// that two Stats of an unchanged queue are equal; pgrouter's is on
	// the database's clock.
	ReadySince time.Time

	Paused bool // no lease is granted until Resume (Router.Pause)
	// Estimated: the per-state counts are estimates, not exact counts
	// (never on the in-process Router; pgrouter's for a large queue, see
	// its Stats), so that they come back fast at millions of jobs.
	Estimated bool
	// EstimatedAsOf, when Estimated, is the instant of the statistics the
	// estimates come from (pgrouter: the jobs table's last ANALYZE); zero
	// when not Estimated or when that instant is unknown. Jobs that came,
	// went or changed state since may be missing from the estimates.
	EstimatedAsOf time.Time
}

// ByState yields every State, in the order of the constants, with the
// number of jobs in it, so code that exports per-state figures need not
// list the states itself. StateDead's is DeadJobs, or the deprecated
// Failed when DeadJobs is 0 (a Stats filled by code written before
// DeadJobs, a StatsReader of another backend say).
func (s Stats) ByState() iter.Seq2[State, int] {
	return func(yield func(State, int) bool) {
		for st, n := range [numStates]int{s.Pending, s.Scheduled, s.Leased, s.Succeeded, cmp.Or(s.DeadJobs, s.Failed), s.Canceled} {
			if !yield(State(st), n) {
				return
			}
		}
	}
}

// Stats returns the counts, the ready order's ReadySince and the totals, after
// settling what is due. It is O(1) and works after Close.
func (r *Router[T]) Stats() Stats {
	r.mu.Lock()
	r.settleNow()
	s := r.stats
	s.Paused = r.paused
	if j, ok := r.ready.Peek(); ok {
		s.ReadySince = r.timeAt(j.at)
	}
	c := r.counts
	r.unlockAndDeliver()
	s.Pending, s.Scheduled, s.Leased = c[StatePending], c[StateScheduled], c[StateLeased]
	s.Succeeded, s.DeadJobs, s.Canceled = c[StateSucceeded], c[StateDead], c[StateCanceled]
	s.Failed = s.DeadJobs
	return s
}
