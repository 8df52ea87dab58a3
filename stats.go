package leaserouter

// Stats: counts by state and totals since New.

// Stats is a point-in-time view of a Router: jobs in each state now, and
// totals since New.
type Stats struct {
	// Jobs in each state now; finished ones count while retained.
	Pending, Scheduled, Leased, Succeeded, Failed, Canceled int
	Enqueued                                                uint64 // jobs accepted by Enqueue
	Duplicates                                              uint64 // Enqueue calls refused with ErrDuplicate
	LeasesGranted                                           uint64 // leases granted (attempts started)
	Heartbeats                                              uint64 // heartbeats accepted
	HeartbeatsRefused                                       uint64 // heartbeats refused because the lease was lost (also counted in StaleRejections)
	Expirations                                             uint64 // leases that expired
	Retries                                                 uint64 // jobs scheduled again by Fail
	Dead                                                    uint64 // jobs that reached StateFailed
	StaleRejections                                         uint64 // lease operations refused because the lease was lost
	Purged                                                  uint64 // finished jobs dropped, at once or after Retention
	CallbackPanics                                          uint64 // panics recovered from Backoff, OnEvent and the Logger's handler
}

// Stats returns the counts and totals, after settling what is due. It is
// O(1) and works after Close.
func (r *Router[T]) Stats() Stats {
	r.mu.Lock()
	if r.phase != phaseClosed {
		r.settle(r.now(), -1)
	}
	s := r.stats
	c := r.counts
	r.unlock()
	s.Pending, s.Scheduled, s.Leased = c[StatePending], c[StateScheduled], c[StateLeased]
	s.Succeeded, s.Failed, s.Canceled = c[StateSucceeded], c[StateFailed], c[StateCanceled]
	return s
}
