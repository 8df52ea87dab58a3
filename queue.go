package leaserouter

import (
	"context"
	"fmt"

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
	return []QueueStats{{Queue: r.queue, Stats: r.Stats()}}, nil
}

// Queue is the admin API of one queue of a Client (Client.Queue): the
// Router's operator calls, on the queue's jobs of every kind, with their
// payloads as any (the T given to their Kind's Enqueue). Each call
// behaves as the Router call of the same name, with the same errors; they
// never wait on more than the queue's lock. A Queue works after Stop as a
// closed Router does (reads answer; Retry, Cancel, Delete, Pause and
// Resume return ErrClosed). A nil Queue (Client.Queue of a queue the
// Client does not have), or a zero one, answers zero values and returns
// errors wrapping ErrInvalidOptions. Safe for concurrent use.
type Queue struct {
	name string
	r    *Router[any]
}

// Name returns the queue's name.
func (q *Queue) Name() string {
	if q == nil {
		return ""
	}
	return q.name
}

// router returns q's Router, or an error wrapping ErrInvalidOptions for
// a Queue not made by Client.Queue.
func (q *Queue) router() (*Router[any], error) {
	if q == nil || q.r == nil {
		return nil, fmt.Errorf("%w: a Queue not made by Client.Queue", ErrInvalidOptions)
	}
	return q.r, nil
}

// Stats returns the queue's counts and totals (Router.Stats).
func (q *Queue) Stats() Stats {
	r, err := q.router()
	if err != nil {
		return Stats{}
	}
	return r.Stats()
}

// QueueStats returns the queue's Stats as a StatsReader: one entry. It
// never fails and ignores ctx.
func (q *Queue) QueueStats(ctx context.Context) ([]QueueStats, error) {
	r, err := q.router()
	if err != nil {
		return nil, err
	}
	return r.QueueStats(ctx)
}

// History returns the queue's throughput per minute (Router.History).
func (q *Queue) History() []Minute {
	r, err := q.router()
	if err != nil {
		return nil
	}
	return r.History()
}

// List returns a page of the queue's jobs (Router.List); ListParams.Kinds
// keeps the jobs of the kinds named.
func (q *Queue) List(p ListParams) (JobPage[any], error) {
	r, err := q.router()
	if err != nil {
		return JobPage[any]{}, err
	}
	page, err := r.List(p)
	unbox(page.Jobs)
	return page, err
}

// Get returns a copy of the job with the given id (Router.Get).
func (q *Queue) Get(id string) (Job[any], bool) {
	r, err := q.router()
	if err != nil {
		return Job[any]{}, false
	}
	j, ok := r.Get(id)
	j.Payload = payloadOf(j.Payload)
	return j, ok
}

// Leases returns the leased jobs, soonest expiry first (Router.Leases).
func (q *Queue) Leases(limit int) ([]Job[any], error) {
	r, err := q.router()
	if err != nil {
		return nil, err
	}
	jobs, err := r.Leases(limit)
	unbox(jobs)
	return jobs, err
}

// LeasePage returns a page of the leased jobs, soonest expiry first
// (Router.LeasePage).
func (q *Queue) LeasePage(p LeasesParams) (JobPage[any], error) {
	r, err := q.router()
	if err != nil {
		return JobPage[any]{}, err
	}
	page, err := r.LeasePage(p)
	unbox(page.Jobs)
	return page, err
}

// A Client's queue stores each job's payload in a cell with the view its
// first attempt's handler gets (kindCell, kind.go). The admin calls show
// the T.

// boxed is a *kindCell[T] as a queue's payload.
type boxed interface{ payloadAny() any }

// payloadOf is the T of a queue's payload p (nil for none).
func payloadOf(p any) any {
	if b, ok := p.(boxed); ok {
		return b.payloadAny()
	}
	return p
}

// unbox replaces each job's payload by its T.
func unbox(jobs []Job[any]) {
	for i := range jobs {
		jobs[i].Payload = payloadOf(jobs[i].Payload)
	}
}

// Retry makes a finished job pending again (Router.Retry).
func (q *Queue) Retry(id string) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Retry(id)
}

// RunNow makes a scheduled job pending now (Router.RunNow).
func (q *Queue) RunNow(id string) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.RunNow(id)
}

// Cancel cancels a job that has not finished (Router.Cancel).
func (q *Queue) Cancel(id string) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Cancel(id)
}

// Delete removes a job that is not leased (Router.Delete).
func (q *Queue) Delete(id string) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Delete(id)
}

// RetryMany is Retry of many jobs, each only in one of states
// (Router.RetryMany).
func (q *Queue) RetryMany(ids []string, states []State) (BulkResult, error) {
	r, err := q.router()
	if err != nil {
		return BulkResult{}, err
	}
	return r.RetryMany(ids, states)
}

// CancelMany is Cancel of many jobs (Router.CancelMany).
func (q *Queue) CancelMany(ids []string, states []State) (BulkResult, error) {
	r, err := q.router()
	if err != nil {
		return BulkResult{}, err
	}
	return r.CancelMany(ids, states)
}

// DeleteMany is Delete of many jobs (Router.DeleteMany).
func (q *Queue) DeleteMany(ids []string, states []State) (BulkResult, error) {
	r, err := q.router()
	if err != nil {
		return BulkResult{}, err
	}
	return r.DeleteMany(ids, states)
}

// Pause stops the queue's grants until Resume (Router.Pause): its
// workers start no job meanwhile, whatever its kind.
func (q *Queue) Pause() error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Pause()
}

// Resume undoes Pause (Router.Resume).
func (q *Queue) Resume() error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Resume()
}

// Flush waits until every event of the queue made before the call is
// delivered to OnEvent and the Logger (Router.Flush).
func (q *Queue) Flush(ctx context.Context) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Flush(ctx)
}

// Audit checks the queue's internal invariants (Router.Audit): for tests
// and operators.
func (q *Queue) Audit() error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Audit()
}
