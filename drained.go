package leaserouter

import "context"

// Drained waits until no job is pending, scheduled or leased in any of
// the Client's queues at one instant, and returns nil: every job enqueued
// before has finished (succeeded, dead or canceled), and so have the
// jobs their handlers enqueued, into any queue. It waits on the job sets
// themselves, not by polling. It returns ctx.Err() if ctx is done first,
// and ErrClosed if the Client is stopped with jobs left (they would never
// run). For tests and batch programs: a service taking new work is
// rarely drained. A Client not started drains only if it has no jobs. A
// nil ctx means context.Background(); a Client not made by NewClient
// (nil, or a zero Client) returns an error wrapping ErrInvalidOptions.
func (c *Client) Drained(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	entered := make([]uint64, len(c.names))
	for {
		// Each queue idle in turn, noting how many jobs had entered it
		// then; then all of them still idle with none entered since: so
		// all were idle at the instant the last of the first pass was,
		// without holding two queues' locks at once.
		for i, name := range c.names {
			e, err := c.queues[name].r.waitIdle(ctx)
			if err != nil {
				return err
			}
			entered[i] = e
		}
		same := true
		for i, name := range c.names {
			idle, e, _ := c.queues[name].r.idleSignal()
			if idle != nil || e != entered[i] {
				same = false
				break
			}
		}
		if same {
			return nil
		}
	}
}

// waitIdle waits until r has no unfinished job and returns how many jobs
// had entered it then (idleSignal), or ctx.Err(), or ErrClosed if r is
// closed with jobs left.
func (r *Router[T]) waitIdle(ctx context.Context) (uint64, error) {
	for {
		idle, entered, closed := r.idleSignal()
		if idle == nil {
			return entered, nil
		}
		if closed {
			return 0, ErrClosed
		}
		select {
		case <-idle:
		case <-r.done: // closed: see again whether it is idle
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// idleSignal returns nil if r has no unfinished job, else a channel
// closed when it has none (setState, drop); with how many jobs had
// entered r (enqueued, or made pending by Retry), and whether r is
// closed.
func (r *Router[T]) idleSignal() (idle <-chan struct{}, entered uint64, closed bool) {
	r.lockSettled()
	entered = r.stats.Enqueued + r.stats.Retried
	if r.unfinished() > 0 {
		if r.idle == nil {
			r.idle = make(chan struct{})
		}
		idle = r.idle
	}
	closed = r.phase == phaseClosed
	r.unlockAndDeliver()
	return idle, entered, closed
}
