package delivery

import "github.com/leaserouter/leaserouter/internal/contract"

// Room is the producers' wait for room in the event backlog, the same
// rule on every backend: a producer of new work (Enqueue, a claim) that
// finds the backlog full (contract.BacklogFull) waits until delivery has
// brought it down to half (contract.BacklogDrained); one that finds it
// below the bound goes on, even just after a fill. Whether to wait is
// decided per call, from the backlog the producer finds; nothing latches.
//
// Its owner's lock guards it (the core's r.mu, pgrouter's e.mu); the zero
// value has no waiter. A hook calling back into the router never waits
// (it would wait for its own delivery): the owner checks that before
// waiting.
type Room struct {
	ch chan struct{} // closed when the backlog is down to half; nil when no producer waits
}

// Full reports whether a producer finding backlog undelivered events
// must wait (contract.BacklogFull).
func Full(backlog int) bool { return contract.BacklogFull(backlog) }

// Wait returns the channel closed once delivery has brought the backlog
// down to half, made on the first wait since the last opening. The caller
// holds the owner's lock, found the backlog Full, and waits on the
// channel after releasing it; once the channel is closed it looks at the
// backlog again (another producer may have filled it meanwhile).
func (r *Room) Wait() <-chan struct{} {
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

// Waiting reports whether a producer waits for room. The caller holds
// the owner's lock.
func (r *Room) Waiting() bool { return r.ch != nil }

// Progressed lets the waiting producers go on once backlog, the events
// still undelivered, is down to half (contract.BacklogDrained). Called by
// the delivery goroutine as it counts its progress, with the owner's
// lock held; it reports whether producers still wait.
func (r *Room) Progressed(backlog int) (waiting bool) {
	if r.ch != nil && contract.BacklogDrained(backlog) {
		close(r.ch)
		r.ch = nil
	}
	return r.ch != nil
}
