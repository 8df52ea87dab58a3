package leaserouter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// The Client: one object a service holds for all its kinds of jobs and
// queues. Each queue is a Router[any] of its own (one lock, one ready
// heap: one claim serves every kind of the queue in the queue's order),
// run by Run's workers with a dispatch by the job's kind in place of a
// handler (Kind.serve, kind.go). The queues share the names of the
// kinds (job.kind indexes one table) and one source of fencing tokens.
//
// SAME RULE on every backend, written once in internal/contract
// (lifecycle.go, client.go) and pinned by internal/routertest's client
// rows: the lifecycle (Lifecycle: Start twice an error, Register's
// checks and its add one step under one lock, the Run goroutines counted
// and their first error kept, Stop idempotent and bounded by its ctx),
// the hooks serial across queues (HookLock), a queue's and a kind's name
// (CheckKindName), the middleware chain (Chain).
//
// TUNED to this backend: each queue is an in-process Router whose Close
// is Stop's work; the kinds' table is shared with the queues' Routers by
// an atomic pointer (Router.kinds) that Register replaces, so that their
// delivery goroutines name a job's kind without the Client's lock; the
// Logger is serial across queues too (HookLock.Handler), its records
// carrying the queue.

// DefaultQueueWorkers is a queue's Workers when its QueueConfig leaves it
// 0: handlers of a service are mostly waiting on I/O, so a queue runs
// many at once (Run's default, GOMAXPROCS, suits CPU-bound handlers).
const DefaultQueueWorkers = 100

// QueueConfig configures one queue of a Client.
type QueueConfig struct {
	// Workers is how many handlers of this queue run at once in this
	// process, across all its kinds. Default DefaultQueueWorkers;
	// negative or above MaxWorkers is invalid.
	Workers int
	// Options overrides ClientOptions.Options for this queue, field by
	// field: a zero field takes the client's value.
	Options Options
	// Timeout limits each attempt of this queue's jobs, as
	// WorkerOptions.Timeout does for Run (a job's WithTimeout overrides
	// it). Default 0: no limit; negative is invalid.
	Timeout time.Duration
}

// ClientOptions configure NewClient.
type ClientOptions struct {
	// Options are every queue's defaults (LeaseDuration, MaxAttempts,
	// Backoff, Retention, Capacity, TokenFloor, OnEvent, Logger), as for
	// New. OnEvent and the Logger get the events of every queue, each
	// Event with its Queue and JobKind; their calls are serial across the
	// queues (never two at once), and in order within a queue. OnEvent
	// may call back into the Client as into a Router: a Kind's Enqueue
	// or a Queue's Flush it calls, into any queue, never waits for event
	// delivery (it must not call Stop). The Logger's records carry the
	// queue ("queue").
	Options
	// Queues names the Client's queues with their configuration; empty,
	// one queue, DefaultQueue, with a zero QueueConfig. A queue's name
	// keeps the rule for IDs (see MaxIDBytes).
	Queues map[string]QueueConfig
	// Middleware wraps every attempt of every queue, Middleware[0]
	// outermost (see Middleware).
	Middleware []Middleware
}

// Client runs many kinds of jobs, each with its payload type and handler
// (Register), over a few queues that keep them apart: a queue's Workers
// bound its running handlers, so a slow kind in one queue never holds
// back another queue. Each queue is one job set, in one order (priority,
// ready time, enqueue order) whatever the kinds in it; fencing tokens
// increase across all the Client's queues. Make one with NewClient,
// Register its kinds, Start it, and Stop it. All methods are safe for
// concurrent use.
type Client struct {
	queues map[string]*clientQueue // never changed after NewClient
	names  []string                // the queues' names, sorted
	mw     []Middleware
	hooks  contract.HookLock // held by each call of OnEvent and the Logger: serial across the queues

	// life is the Client's lifecycle (New, Started, Stopped). Its lock
	// guards the fields below: they are written only under it, by
	// Register (kind.go) and Start, and not after Start.
	life     *contract.Lifecycle
	kinds    []kindRunner // by kind index (job.kind); kinds[0] is nil, "" is no Kind's
	kindName []string     // by kind index; the queues' Routers share it (Router.kinds)
	// chain is the middleware composed once at Start; nil without
	// middleware. Written before the workers start, read by them.
	chain func(ctx context.Context, a Attempt, inner func(context.Context) error) error
}

// clientQueue is one queue of a Client.
type clientQueue struct {
	r     *Router[any]
	run   WorkerOptions // its Run's, checked by NewClient
	admin Queue
}

// NewClient returns a Client with the queues of opts, which accepts jobs
// (Kind.Enqueue) at once and runs them from Start. Every queue's options
// are checked as New checks them, a queue's Options merged over the
// client's field by field; a bad field, a negative Workers (or above
// MaxWorkers) or Timeout, a LeaseDuration too short for Run's heartbeat
// interval, or an invalid queue name (see MaxIDBytes)
// returns an error wrapping ErrInvalidOptions that names the field and
// the queue, and starts nothing. NewClient starts each queue's reaper
// (and, with OnEvent or a Logger, its delivery goroutine): call Stop,
// even if the Client never started.
func NewClient(opts ClientOptions) (*Client, error) {
	queues := opts.Queues
	if len(queues) == 0 {
		queues = map[string]QueueConfig{DefaultQueue: {}}
	}
	c := &Client{
		queues:   make(map[string]*clientQueue, len(queues)),
		names:    slices.Sorted(maps.Keys(queues)),
		mw:       slices.Clone(opts.Middleware),
		kinds:    []kindRunner{nil},
		kindName: []string{""},
		hooks:    contract.NewHookLock(),
		life:     contract.NewLifecycle(ErrInvalidOptions, ErrClosed),
	}
	for i, m := range c.mw {
		if m == nil {
			return nil, fmt.Errorf("%w: Middleware[%d] is nil", ErrInvalidOptions, i)
		}
	}
	tokens := new(tokenSource)
	peers := new([]*handoff)
	for _, name := range c.names {
		qc := queues[name]
		q, err := c.newQueue(name, qc, opts.Options, tokens)
		if err != nil {
			_ = c.closeAll(context.Background()) // no lease, no event: at once
			return nil, err
		}
		c.queues[name] = q
		if q.r.delivery != nil {
			*peers = append(*peers, q.r.delivery)
		}
		// Read only by a hook calling back, after NewClient has returned.
		q.r.peers = peers
	}
	return c, nil
}

// newQueue checks qc and makes queue name's Router.
func (c *Client) newQueue(name string, qc QueueConfig, base Options, tokens *tokenSource) (*clientQueue, error) {
	if err := contract.CheckKindName(ErrInvalidOptions, "queue", name); err != nil {
		return nil, err
	}
	if qc.Workers < 0 || qc.Workers > MaxWorkers {
		return nil, fmt.Errorf("%w: queue %s: Workers is %d, must be in [0, %d] (0 = DefaultQueueWorkers)",
			ErrInvalidOptions, contract.Quote(name), qc.Workers, MaxWorkers)
	}
	if qc.Timeout < 0 {
		return nil, fmt.Errorf("%w: queue %s: Timeout is %v, must be >= 0 (0 = none)", ErrInvalidOptions, contract.Quote(name), qc.Timeout)
	}
	o := qc.Options.over(base)
	o.OnEvent = contract.SerialHook(c.hooks, o.OnEvent)
	if o.Logger != nil {
		o.Logger = slog.New(c.hooks.Handler(o.Logger.Handler())).With(slog.String("queue", name))
	}
	r, err := newRouter[any](o, name, tokens)
	if err != nil {
		return nil, fmt.Errorf("%w (queue %s)", err, contract.Quote(name))
	}
	// Run's own checks, now: a queue Start's Run would refuse (a
	// LeaseDuration too short for a heartbeat interval) would otherwise
	// stay idle, told only by Stop.
	wo := WorkerOptions{Workers: cmp.Or(qc.Workers, DefaultQueueWorkers), Timeout: qc.Timeout}
	if err := contract.WorkerDefaults(ErrInvalidOptions, false, r.opts.LeaseDuration,
		&wo.Workers, &wo.WorkerID, &wo.HeartbeatInterval, &wo.Batch, wo.Timeout); err != nil {
		_ = r.Close(context.Background()) // no lease, no event: at once
		return nil, fmt.Errorf("%w (queue %s)", err, contract.Quote(name))
	}
	r.kinds.Store(&c.kindName)
	q := &clientQueue{r: r, run: wo}
	q.admin = Queue{name: name, r: r}
	return q, nil
}

// over is o with each zero field taken from base.
func (o Options) over(base Options) Options {
	o.LeaseDuration = cmp.Or(o.LeaseDuration, base.LeaseDuration)
	o.MaxAttempts = cmp.Or(o.MaxAttempts, base.MaxAttempts)
	o.Retention = cmp.Or(o.Retention, base.Retention)
	o.Capacity = cmp.Or(o.Capacity, base.Capacity)
	o.TokenFloor = cmp.Or(o.TokenFloor, base.TokenFloor)
	if o.Backoff == nil {
		o.Backoff = base.Backoff
	}
	if o.OnEvent == nil {
		o.OnEvent = base.OnEvent
	}
	if o.Logger == nil {
		o.Logger = base.Logger
	}
	return o
}

// Start starts the workers of every queue and returns at once: from now
// on each queue runs its jobs, Workers handlers at a time, each job's
// handler the one its kind registered, inside the middleware. ctx is the
// parent of every handler's ctx: when it is done the queues lease no more
// jobs and the handlers' contexts are canceled, as Run's are (Stop is
// still needed to release what the Client holds). It returns an error
// wrapping ErrInvalidOptions if the Client was started before, and
// ErrClosed after Stop; it starts nothing then. A nil ctx means
// context.Background(); a Client not made by NewClient (nil, or a zero
// Client) returns an error wrapping ErrInvalidOptions.
func (c *Client) Start(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return c.life.Start(func([]string) []func() error {
		if len(c.mw) > 0 {
			c.chain = chain(c.mw)
		}
		runs := make([]func() error, len(c.names))
		for i, name := range c.names {
			q := c.queues[name]
			runs[i] = func() error {
				if err := q.r.Run(ctx, q.run, c.dispatch); err != nil {
					return fmt.Errorf("%w (queue %s)", err, contract.Quote(name))
				}
				return nil
			}
		}
		return runs
	})
}

// dispatch is the handler of every queue's Run: it runs the handler of
// l's kind (Kind.serve), inside Run's recover, so a panic in a
// middleware is the attempt's. Workers call it without c.mu: c.kinds is
// not written after Start.
func (c *Client) dispatch(ctx context.Context, l *Lease[any]) error {
	return c.kinds[l.j.kind].serve(ctx, l)
}

// Stop stops the Client: every queue, concurrently, stops leasing jobs
// (the jobs a worker leased and had not started go back, unstarted, to
// their place in the order) and refuses new ones (Enqueue returns
// ErrClosed, from a handler too); handlers running go on until they
// return or ctx is done; then the leases still held are revoked (their
// handlers' contexts canceled, their jobs pending again, the attempt
// counted) and the queues close as Router.Close does, events delivered.
// Stop returns once every handler has returned and the queues are
// closed, nil; or ctx.Err() when ctx is done first, within about 100 ms
// of its end (a handler that ignores its canceled ctx is then left
// running, and its lease refused). It also returns an error a queue's
// workers stopped with (ErrTokensExhausted). Calling Stop again, or
// concurrently, waits until ctx is done for the first call to finish
// and returns nil. Stop of a Client never started closes its queues.
// OnEvent, a handler, and a periodic job's Payload or Schedule must not
// call Stop (each would wait for itself until ctx is done: call it from
// another goroutine). Jobs not run stay in the queues' closed job sets: a
// Client keeps nothing across processes. A nil ctx means
// context.Background(); a Client not made by NewClient (nil, or a zero
// Client) returns an error wrapping ErrInvalidOptions.
func (c *Client) Stop(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return c.life.Stop(ctx, c.closeAll, nil)
}

// closeAll closes every queue at once, so that Stop's bound is ctx's
// however many queues there are, and returns the first error.
func (c *Client) closeAll(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.names))
	for i, name := range c.names {
		if q := c.queues[name]; q != nil {
			wg.Go(func() { errs[i] = q.r.Close(ctx) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Queue returns the admin API of the queue named name (List, Retry,
// Pause, ...), or nil if the Client has no such queue (or was not made by
// NewClient). A nil Queue's methods return errors wrapping
// ErrInvalidOptions, or zero answers.
func (c *Client) Queue(name string) *Queue {
	if c == nil {
		return nil
	}
	if q := c.queues[name]; q != nil {
		return &q.admin
	}
	return nil
}

// QueueNames returns the names of the Client's queues, sorted (a new
// slice; nil for a nil Client).
func (c *Client) QueueNames() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.names)
}

// QueueStats returns each queue's Stats, in the order of QueueNames. It
// never fails and ignores ctx; it works after Stop. (Client is a
// StatsReader.) A Client not made by NewClient (nil, or a zero Client)
// returns an error wrapping ErrInvalidOptions.
func (c *Client) QueueStats(ctx context.Context) ([]QueueStats, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	s := make([]QueueStats, len(c.names))
	for i, name := range c.names {
		s[i] = QueueStats{Queue: name, Stats: c.queues[name].r.Stats()}
	}
	return s, nil
}

// check returns an error wrapping ErrInvalidOptions for a Client that
// NewClient did not make (nil, or a zero Client).
func (c *Client) check() error {
	if c == nil || c.queues == nil {
		return fmt.Errorf("%w: a Client not made by NewClient", ErrInvalidOptions)
	}
	return nil
}
