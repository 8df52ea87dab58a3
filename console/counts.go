package console

import (
	"context"
	"errors"
	"sync"

	"github.com/leaserouter/leaserouter"
)

// ExactCounter is implemented by a Source whose Stats may estimate its
// counts (leaserouter.Stats.Estimated) and that can count exactly on
// demand, at a cost that grows with the queue (pgrouter's Router has
// this method). For such a source the overview shows estimated counts as
// estimates, with the instant of the statistics they come from
// (Stats.EstimatedAsOf), and a "count exactly" link ("?exact=queue")
// that asks ExactStats instead of Stats for that page. Such a page is
// authorized as ViewOverview and then as CountExactly. One exact count of
// a queue runs at a time: the requests for it that come while it runs
// wait for it and share its result (each waiting at most until its own
// request ends). A Source without it, such as Router's (whose Stats are
// exact), gets no such link.
type ExactCounter interface {
	ExactStats(ctx context.Context) (leaserouter.Stats, error)
}

// queueStats is s's Stats, or its ExactStats when exact and s has them
// (through flights); counted says which.
func queueStats(ctx context.Context, s Source, exact bool, flights *exactCounts) (st leaserouter.Stats, counted bool, err error) {
	if ec, ok := s.(ExactCounter); ok && exact {
		st, err = flights.count(ctx, s.Queue(), ec)
		return st, true, err
	}
	st, err = s.Stats(ctx)
	return st, false, err
}

// exactCounts runs at most one exact count per queue at a time (as
// golang.org/x/sync/singleflight): a request asking for a queue's count
// while one runs waits for it and takes its result. The count runs on
// the ctx of the request that started it, and no goroutine of its own:
// when that request ends first, its waiters whose own requests go on
// start another.
type exactCounts struct {
	mu      sync.Mutex
	running map[string]*exactCount // by queue
}

// exactCount is one running count; st and err are set before done closes.
type exactCount struct {
	done chan struct{}
	st   leaserouter.Stats
	err  error
}

// count is ec's ExactStats, counted by this call or by the one running
// for queue; ctx.Err() if ctx ends while it waits for another's.
func (e *exactCounts) count(ctx context.Context, queue string, ec ExactCounter) (leaserouter.Stats, error) {
	for {
		e.mu.Lock()
		c, running := e.running[queue]
		if !running {
			c = &exactCount{done: make(chan struct{})}
			if e.running == nil {
				e.running = map[string]*exactCount{}
			}
			e.running[queue] = c
		}
		e.mu.Unlock()
		if !running {
			return e.run(ctx, queue, ec, c)
		}
		select {
		case <-ctx.Done():
			return leaserouter.Stats{}, ctx.Err()
		case <-c.done:
		}
		if ctx.Err() == nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) {
			continue // the request that counted ended; this one goes on
		}
		return c.st, c.err
	}
}

// run counts for c, then ends c: its waiters take the result, and the
// next request counts again. Deferred so that a panicking ExactStats
// (which net/http recovers from) leaves no count waited for forever.
func (e *exactCounts) run(ctx context.Context, queue string, ec ExactCounter, c *exactCount) (leaserouter.Stats, error) {
	c.err = context.Canceled // if ExactStats panics
	defer func() {
		e.mu.Lock()
		delete(e.running, queue)
		e.mu.Unlock()
		close(c.done)
	}()
	c.st, c.err = ec.ExactStats(ctx)
	return c.st, c.err
}
