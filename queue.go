package leaserouter

import (
	"context"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// DefaultQueue is the name of a Client's queue when ClientOptions.Queues
// is empty, the queue of a kind registered without WithKindQueue, and the
// queue a Router's jobs are in as Stats readers and Event.Queue report
// it.
const DefaultQueue = contract.DefaultQueue

// WithQueue sends the job to queue instead of its kind's (WithKindQueue).
// The queue must be one the Client has configured; any other makes
// Enqueue return an error wrapping ErrInvalidJob. A Router serves one
// queue (DefaultQueue; pgrouter: its Options.Queue) and accepts WithQueue
// of that queue only, refusing any other with ErrInvalidJob. The last
// WithQueue of a list wins; an empty queue is no option.
func WithQueue(queue string) EnqueueOption { return EnqueueOption(contract.WithQueue(queue)) }

// QueueStats is one queue's Stats, as a StatsReader reports it.
type QueueStats struct {
	Queue string // the queue's name
	Stats Stats
}

// StatsReader is what observes a job set, whatever its backend: a core
// Router (one queue, DefaultQueue), a pgrouter Router (its queue), and a
// Client of either backend (each of its queues, in name order).
// QueueStats returns one entry per queue, or the first error (a core
// Router never fails; pgrouter returns a driver error or ctx's). The
// prometheus and otel modules observe any StatsReader.
type StatsReader interface {
	QueueStats(ctx context.Context) ([]QueueStats, error)
}

// QueueStats is Stats as a StatsReader reports it: one entry, queue
// DefaultQueue. It never fails and ignores ctx; it works after Close.
func (r *Router[T]) QueueStats(ctx context.Context) ([]QueueStats, error) {
	return []QueueStats{{Queue: DefaultQueue, Stats: r.Stats()}}, nil
}
