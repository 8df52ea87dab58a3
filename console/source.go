package console

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/leaserouter/leaserouter"
)

// Source is one queue the console shows and acts on. The in-process
// adapters are Router, Queue and Client; pgrouter's Router[T], of any
// payload type T, and its Queue have this method set too (without
// importing this package), and any other backend may implement it. Every
// method may be called concurrently, from the goroutines of the HTTP
// server; ctx is the request's. Payloads are JSON (json.RawMessage), so
// that one console shows queues of any payload type; the three methods
// that return jobs say so in their names (ListJSON, LeasePageJSON, GetJSON),
// which lets a backend's typed Router, whose List, Leases and Get return
// its payload type, be a Source as it is.
//
// The console maps errors by errors.Is: leaserouter.ErrNotFound (404),
// ErrNotFinished, ErrNotScheduled and ErrLeased (409), ErrInvalidOptions (400, as List
// returns for a bad cursor); any other error is the backend's failure
// (500, its message shown, never a stack).
type Source interface {
	// Queue is the queue's name as the console shows it and as the
	// "queue" parameter of its URLs names it. It must be constant, unique
	// among the sources of one console, and not empty.
	Queue() string
	// Stats is leaserouter.Router.Stats.
	Stats(ctx context.Context) (leaserouter.Stats, error)
	// History is leaserouter.Router.History: per minute, oldest first.
	History(ctx context.Context) ([]leaserouter.Minute, error)
	// ListJSON is leaserouter.Router.List, payloads as JSON. The
	// console's list pages (jobs, dead) set ListParams.OmitPayload: they
	// show neither payload nor checkpoint, and a Source should then read
	// neither. The jobs page's kind filter is ListParams.Kinds.
	ListJSON(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[json.RawMessage], error)
	// LeasePageJSON is leaserouter.Router.LeasePage: a page of the
	// leases, the lease expiring soonest first, its jobs without payload
	// or checkpoint (the page shows neither), paged by a cursor.
	LeasePageJSON(ctx context.Context, p leaserouter.LeasesParams) (leaserouter.JobPage[json.RawMessage], error)
	// GetJSON is leaserouter.Router.Get, the payload as JSON; ok is
	// false for an unknown job. The job page shows every field, Kind and
	// Metadata included.
	GetJSON(ctx context.Context, id string) (leaserouter.Job[json.RawMessage], bool, error)
	// Retry is leaserouter.Router.Retry.
	Retry(ctx context.Context, id string) error
	// RunNow is leaserouter.Router.RunNow: a scheduled job pending now.
	RunNow(ctx context.Context, id string) error
	// Cancel is leaserouter.Router.Cancel.
	Cancel(ctx context.Context, id string) error
	// Delete is leaserouter.Router.Delete.
	Delete(ctx context.Context, id string) error
	// RetryMany is leaserouter.Router.RetryMany: each job of ids retried
	// only if it is still in one of states (empty: any), the counts in
	// the result. The console's bulk retry calls it once per state the
	// jobs were shown in, with that state, at most MaxBulk IDs in all.
	RetryMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error)
	// CancelMany is leaserouter.Router.CancelMany, as RetryMany.
	CancelMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error)
	// DeleteMany is leaserouter.Router.DeleteMany, as RetryMany.
	DeleteMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error)
	// Pause is leaserouter.Router.Pause.
	Pause(ctx context.Context) error
	// Resume is leaserouter.Router.Resume.
	Resume(ctx context.Context) error
}

// Router returns the Source of an in-process Router, shown under the name
// queue. Payloads are marshaled with encoding/json; a payload that fails
// to marshal shows as a JSON string saying why, never as an error. The
// calls do not block but on the router's lock (ctx is only checked
// first; the bulk calls also wait while the router's event backlog is
// full); they work after Close as the Router's own calls do (reads
// answer, actions return leaserouter.ErrClosed). A nil r makes every call
// of the Source panic; New refuses an empty queue name.
func Router[T any](queue string, r *leaserouter.Router[T]) Source {
	return &routerSource[T]{queue: queue, r: r}
}

// Queue returns the Source of one queue of an in-process Client
// (leaserouter.Client.Queue), shown under the queue's name, its jobs of
// every kind with their payloads marshaled as Router's are. Its calls
// block, fail and work after the Client's Stop as Router's do. A nil q
// makes every call of the Source panic.
func Queue(q *leaserouter.Queue) Source {
	return &routerSource[any]{queue: q.Name(), r: q}
}

// Client returns the Sources of every queue of an in-process Client, one
// per queue (Queue), in the order of c.QueueNames; a nil c returns nil.
// The Sources work after c's Stop as Queue's do.
//
//	h, err := console.New(console.Options{}, console.Client(client)...)
func Client(c *leaserouter.Client) []Source {
	if c == nil {
		return nil
	}
	names := c.QueueNames()
	out := make([]Source, len(names))
	for i, name := range names {
		out[i] = Queue(c.Queue(name))
	}
	return out
}

// admin is the admin API of an in-process job set: a Router[T], or a
// Client's Queue (T any).
type admin[T any] interface {
	Stats() leaserouter.Stats
	History() []leaserouter.Minute
	List(p leaserouter.ListParams) (leaserouter.JobPage[T], error)
	LeasePage(p leaserouter.LeasesParams) (leaserouter.JobPage[T], error)
	Get(id string) (leaserouter.Job[T], bool)
	Retry(id string) error
	RunNow(id string) error
	Cancel(id string) error
	Delete(id string) error
	RetryMany(ids []string, states []leaserouter.State) (leaserouter.BulkResult, error)
	CancelMany(ids []string, states []leaserouter.State) (leaserouter.BulkResult, error)
	DeleteMany(ids []string, states []leaserouter.State) (leaserouter.BulkResult, error)
	Pause() error
	Resume() error
}

type routerSource[T any] struct {
	queue string
	r     admin[T]
}

func (s *routerSource[T]) Queue() string { return s.queue }

func (s *routerSource[T]) Stats(ctx context.Context) (leaserouter.Stats, error) {
	if err := ctx.Err(); err != nil {
		return leaserouter.Stats{}, err
	}
	return s.r.Stats(), nil
}

func (s *routerSource[T]) History(ctx context.Context) ([]leaserouter.Minute, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.r.History(), nil
}

func (s *routerSource[T]) ListJSON(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[json.RawMessage], error) {
	var out leaserouter.JobPage[json.RawMessage]
	if err := ctx.Err(); err != nil {
		return out, err
	}
	page, err := s.r.List(p)
	if err != nil {
		return out, err
	}
	out.NextCursor = page.NextCursor
	out.Jobs = make([]leaserouter.Job[json.RawMessage], len(page.Jobs))
	for i, j := range page.Jobs {
		out.Jobs[i] = rawJob(j, !p.OmitPayload)
	}
	return out, nil
}

func (s *routerSource[T]) LeasePageJSON(ctx context.Context, p leaserouter.LeasesParams) (leaserouter.JobPage[json.RawMessage], error) {
	var out leaserouter.JobPage[json.RawMessage]
	if err := ctx.Err(); err != nil {
		return out, err
	}
	page, err := s.r.LeasePage(p)
	if err != nil {
		return out, err
	}
	out.NextCursor = page.NextCursor
	out.Jobs = make([]leaserouter.Job[json.RawMessage], len(page.Jobs))
	for i, j := range page.Jobs {
		out.Jobs[i] = rawJob(j, false) // LeasePage carries no payload
	}
	return out, nil
}

func (s *routerSource[T]) GetJSON(ctx context.Context, id string) (leaserouter.Job[json.RawMessage], bool, error) {
	if err := ctx.Err(); err != nil {
		return leaserouter.Job[json.RawMessage]{}, false, err
	}
	j, ok := s.r.Get(id)
	if !ok {
		return leaserouter.Job[json.RawMessage]{}, false, nil
	}
	return rawJob(j, true), true, nil
}

func (s *routerSource[T]) Retry(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.r.Retry(id)
}

func (s *routerSource[T]) RunNow(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.r.RunNow(id)
}

func (s *routerSource[T]) Cancel(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.r.Cancel(id)
}

func (s *routerSource[T]) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.r.Delete(id)
}

func (s *routerSource[T]) RetryMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	if err := ctx.Err(); err != nil {
		return leaserouter.BulkResult{}, err
	}
	return s.r.RetryMany(ids, states)
}

func (s *routerSource[T]) CancelMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	if err := ctx.Err(); err != nil {
		return leaserouter.BulkResult{}, err
	}
	return s.r.CancelMany(ids, states)
}

func (s *routerSource[T]) DeleteMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	if err := ctx.Err(); err != nil {
		return leaserouter.BulkResult{}, err
	}
	return s.r.DeleteMany(ids, states)
}

func (s *routerSource[T]) Pause(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.r.Pause()
}

func (s *routerSource[T]) Resume(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.r.Resume()
}

// rawJob is j with its payload as JSON, when it has one (withPayload:
// not from List with OmitPayload or Leases, whose zero Payload is none,
// and is not marshaled: nil).
func rawJob[T any](j leaserouter.Job[T], withPayload bool) leaserouter.Job[json.RawMessage] {
	var payload json.RawMessage
	if withPayload {
		payload = marshalPayload(j.Payload)
	}
	return leaserouter.Job[json.RawMessage]{
		ID: j.ID, Payload: payload, State: j.State, Priority: j.Priority,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Token: j.Token, Owner: j.Owner,
		LeaseExpiry: j.LeaseExpiry, LeasedAt: j.LeasedAt, RunAt: j.RunAt, Progress: j.Progress, LastError: j.LastError, Errors: j.Errors, Timeout: j.Timeout,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, Kind: j.Kind, Metadata: j.Metadata,
	}
}

// marshalPayload is v as JSON or, when it cannot be marshaled (a channel,
// a func, a cycle, a failing MarshalJSON, a panic in one), a JSON string
// saying so.
func marshalPayload(v any) (out json.RawMessage) {
	defer func() {
		if p := recover(); p != nil {
			out = unmarshalable(fmt.Errorf("panic: %v", p))
		}
	}()
	b, err := json.Marshal(v)
	if err != nil {
		return unmarshalable(err)
	}
	return b
}

func unmarshalable(err error) json.RawMessage {
	b, _ := json.Marshal(fmt.Sprintf("(the payload cannot be shown as JSON: %v)", err))
	return b
}
