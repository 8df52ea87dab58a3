package pgrouter

import (
	"context"
	"encoding/json"

	"github.com/leaserouter/leaserouter"
)

// Queue is one queue of a Client, for operators: the admin calls of a
// Router (see Router's methods of the same names) over every kind of job
// in the queue, payloads as the table's JSON. It is what a console shows.
// Its calls work after the Client's Stop as a closed Router's do (reads
// answer; Retry, Cancel, Delete and their batch forms return
// leaserouter.ErrClosed). Safe for concurrent use.
type Queue struct {
	r *Router[json.RawMessage]
}

// Queue returns the queue's name.
func (q *Queue) Queue() string { return q.r.opts.Queue }

// Stats is Router.Stats of the queue: counts by state from the table (every
// kind), totals this process's since NewClient.
func (q *Queue) Stats(ctx context.Context) (leaserouter.Stats, error) { return q.r.Stats(ctx) }

// History is Router.History of the queue.
func (q *Queue) History(ctx context.Context) ([]leaserouter.Minute, error) { return q.r.History(ctx) }

// List is Router.List of the queue: jobs of every kind (ListParams.Kinds
// filters).
func (q *Queue) List(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[json.RawMessage], error) {
	return q.r.List(ctx, p)
}

// ListJSON is List: the queue's payloads are the table's JSON already.
// With it (and GetJSON and LeasesJSON) a Queue is a console.Source.
func (q *Queue) ListJSON(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[json.RawMessage], error) {
	return q.List(ctx, p)
}

// GetJSON is Get, for a console.
func (q *Queue) GetJSON(ctx context.Context, id string) (leaserouter.Job[json.RawMessage], bool, error) {
	return q.Get(ctx, id)
}

// LeasesJSON is Leases, for a console.
func (q *Queue) LeasesJSON(ctx context.Context, limit int) ([]leaserouter.Job[json.RawMessage], error) {
	return q.Leases(ctx, limit)
}

// Get is Router.Get of the queue.
func (q *Queue) Get(ctx context.Context, id string) (leaserouter.Job[json.RawMessage], bool, error) {
	return q.r.Get(ctx, id)
}

// Leases is Router.Leases of the queue.
func (q *Queue) Leases(ctx context.Context, limit int) ([]leaserouter.Job[json.RawMessage], error) {
	return q.r.Leases(ctx, limit)
}

// Retry is Router.Retry of the queue.
func (q *Queue) Retry(ctx context.Context, id string) error { return q.r.Retry(ctx, id) }

// Cancel is Router.Cancel of the queue.
func (q *Queue) Cancel(ctx context.Context, id string) error { return q.r.Cancel(ctx, id) }

// Delete is Router.Delete of the queue.
func (q *Queue) Delete(ctx context.Context, id string) error { return q.r.Delete(ctx, id) }

// RetryMany is Router.RetryMany of the queue.
func (q *Queue) RetryMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	return q.r.RetryMany(ctx, ids, states)
}

// CancelMany is Router.CancelMany of the queue.
func (q *Queue) CancelMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	return q.r.CancelMany(ctx, ids, states)
}

// DeleteMany is Router.DeleteMany of the queue.
func (q *Queue) DeleteMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	return q.r.DeleteMany(ctx, ids, states)
}

// Pause is Router.Pause of the queue: no process leases its jobs, of
// any kind, until Resume.
func (q *Queue) Pause(ctx context.Context) error { return q.r.Pause(ctx) }

// Resume is Router.Resume of the queue.
func (q *Queue) Resume(ctx context.Context) error { return q.r.Resume(ctx) }

// Name returns the queue's name (as Queue does; the core's Queue has
// Name).
func (q *Queue) Name() string { return q.r.opts.Queue }
