package pgrouter

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/leaserouter/leaserouter"
)

// Queue is one queue of a Client, for operators: the admin calls of a
// Router (see Router's methods of the same names) over every kind of job
// in the queue, payloads as the table's JSON. It is what a console shows.
// Its calls work after the Client's Stop as a closed Router's do (reads
// answer; Retry, Cancel, Delete and their batch forms return
// leaserouter.ErrClosed). Safe for concurrent use. A nil *Queue (what
// Client.Queue returns for a queue the Client does not have) answers
// every call with an error wrapping leaserouter.ErrInvalidOptions, and
// Name and Queue with "".
type Queue struct {
	r *Router[json.RawMessage]
}

// router returns q's Router, or an error wrapping
// leaserouter.ErrInvalidOptions for a Queue not made by Client.Queue.
func (q *Queue) router() (*Router[json.RawMessage], error) {
	if q == nil || q.r == nil {
		return nil, fmt.Errorf("%w: a Queue not made by Client.Queue", leaserouter.ErrInvalidOptions)
	}
	return q.r, nil
}

// Queue returns the queue's name ("" for a nil Queue).
func (q *Queue) Queue() string { return q.Name() }

// Stats is Router.Stats of the queue: counts by state from the table (every
// kind), totals this process's since NewClient.
func (q *Queue) Stats(ctx context.Context) (leaserouter.Stats, error) {
	r, err := q.router()
	if err != nil {
		return leaserouter.Stats{}, err
	}
	return r.Stats(ctx)
}

// History is Router.History of the queue.
func (q *Queue) History(ctx context.Context) ([]leaserouter.Minute, error) {
	r, err := q.router()
	if err != nil {
		return nil, err
	}
	return r.History(ctx)
}

// List is Router.List of the queue: jobs of every kind (ListParams.Kinds
// filters).
func (q *Queue) List(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[json.RawMessage], error) {
	r, err := q.router()
	if err != nil {
		return leaserouter.JobPage[json.RawMessage]{}, err
	}
	return r.List(ctx, p)
}

// ListJSON is List: the queue's payloads are the table's JSON already.
// With it (and GetJSON, LeasePageJSON and RunNow) a Queue is a
// console.Source.
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
	r, err := q.router()
	if err != nil {
		return leaserouter.Job[json.RawMessage]{}, false, err
	}
	return r.Get(ctx, id)
}

// Leases is Router.Leases of the queue.
func (q *Queue) Leases(ctx context.Context, limit int) ([]leaserouter.Job[json.RawMessage], error) {
	r, err := q.router()
	if err != nil {
		return nil, err
	}
	return r.Leases(ctx, limit)
}

// Retry is Router.Retry of the queue.
func (q *Queue) Retry(ctx context.Context, id string) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Retry(ctx, id)
}

// Cancel is Router.Cancel of the queue.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Cancel(ctx, id)
}

// Delete is Router.Delete of the queue.
func (q *Queue) Delete(ctx context.Context, id string) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Delete(ctx, id)
}

// RetryMany is Router.RetryMany of the queue.
func (q *Queue) RetryMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	r, err := q.router()
	if err != nil {
		return leaserouter.BulkResult{}, err
	}
	return r.RetryMany(ctx, ids, states)
}

// CancelMany is Router.CancelMany of the queue.
func (q *Queue) CancelMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	r, err := q.router()
	if err != nil {
		return leaserouter.BulkResult{}, err
	}
	return r.CancelMany(ctx, ids, states)
}

// DeleteMany is Router.DeleteMany of the queue.
func (q *Queue) DeleteMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	r, err := q.router()
	if err != nil {
		return leaserouter.BulkResult{}, err
	}
	return r.DeleteMany(ctx, ids, states)
}

// Pause is Router.Pause of the queue: no process leases its jobs, of
// any kind, until Resume.
func (q *Queue) Pause(ctx context.Context) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Pause(ctx)
}

// Resume is Router.Resume of the queue.
func (q *Queue) Resume(ctx context.Context) error {
	r, err := q.router()
	if err != nil {
		return err
	}
	return r.Resume(ctx)
}

// Name returns the queue's name (as Queue does; the core's Queue has
// Name); "" for a nil Queue.
func (q *Queue) Name() string {
	if r, err := q.router(); err == nil {
		return r.opts.Queue
	}
	return ""
}
