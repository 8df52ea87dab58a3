package pgrouter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// The Client: one object a service holds for all its kinds of jobs and
// queues, with the core's names. Each queue is a Router of
// json.RawMessage payloads (Client.queues), whose claim serves every kind
// the Client registered (Options.kinds: one claim, in the queue's order,
// whatever the kind) and whose Run dispatches each lease to its kind's
// handler by the claim's arm (Kind.serve, kind.go). The queues share one
// listener and one heartbeat connection (shared.go).
//
// SAME RULE on every backend, written once in internal/contract
// (lifecycle.go, client.go) and pinned by internal/routertest's client
// rows: the lifecycle (Lifecycle: Start twice an error, Register's
// checks and its add one step under one lock, the Run goroutines counted
// and their first error kept, Stop idempotent and bounded by its ctx),
// OnEvent serial across queues (HookLock), a queue's and a kind's name
// (CheckKindName), the middleware chain (Chain).
//
// TUNED to this backend: Start gives each queue's claim the registered
// kinds (serveKinds: the claim's arms), and no Run when no kind is
// registered (nothing to claim); Stop, once the queues are
// closed and their Runs returned, closes the shared listening and
// heartbeat connections and wakes Drained; the Logger is the user's,
// with the queue added, not serialized (slog handlers are safe for
// concurrent use; only OnEvent's calls are promised serial here).

// DefaultQueueWorkers is a queue's Workers when its QueueConfig leaves it
// 0: a service's handlers mostly wait on I/O, so a queue runs many at
// once (Run's default, GOMAXPROCS, suits CPU-bound handlers).
const DefaultQueueWorkers = 100

// QueueConfig configures one queue of a Client.
type QueueConfig struct {
	// Workers is how many handlers of this queue run at once in this
	// process, across all its kinds. Default DefaultQueueWorkers;
	// negative or above leaserouter.MaxWorkers is invalid.
	Workers int
	// Options overrides ClientOptions.Options for this queue, field by
	// field: a zero field takes the client's value. Its Queue and Kind
	// are ignored (the map's key names the queue; a queue serves the
	// Client's kinds), and so are PollInterval and NoVacuum (the
	// Client's apply to every queue). Its Schema must be "" or the
	// Client's (every queue of a Client is in one schema): NewClient
	// refuses another with an error wrapping leaserouter.ErrInvalidOptions.
	Options Options
	// Timeout limits each attempt of this queue's jobs, as
	// WorkerOptions.Timeout does for Run (a job's WithTimeout overrides
	// it). Default 0: no limit; negative is invalid.
	Timeout time.Duration
}

// ClientOptions configure NewClient.
type ClientOptions struct {
	// Options are every queue's defaults (LeaseDuration, MaxAttempts,
	// Backoff, Retention, TokenFloor, PollInterval, NoVacuum, OnEvent,
	// Logger), as for New; Queue and Kind are ignored. OnEvent gets the
	// events of every queue; its calls are serial across the queues
	// (never two at once), and in order within a queue. While it runs,
	// the other queues' events wait for it: an OnEvent that enqueues into
	// another queue whose event backlog is full (see Options.OnEvent)
	// waits until its ctx ends, as that backlog drains only after it
	// returns. The Logger's records carry the queue ("queue"); its calls
	// are not serial (the background loops log while an OnEvent runs).
	// Only the first queue, in name order, vacuums the jobs table (see
	// New), unless NoVacuum.
	Options
	// Queues names the Client's queues with their configuration; empty,
	// one queue, DefaultQueue, with a zero QueueConfig. A queue's name
	// follows Options.Queue's rule (see MaxQueueBytes).
	Queues map[string]QueueConfig
	// Middleware wraps every attempt of every queue, Middleware[0]
	// outermost (see leaserouter.Middleware).
	Middleware []leaserouter.Middleware
}

// Client runs many kinds of jobs, each with its payload type and handler
// (Register), over a few queues of the database's job set that keep them
// apart: a queue's Workers bound its running handlers in this process, so
// a slow kind in one queue never holds back another. A queue's claim
// takes jobs of every kind the Client registered, in the queue's order
// (priority, ready time, enqueue order), and only those: during a deploy,
// a job of a kind this process does not know is never leased by it (no
// attempt counted); a process that registers it runs it. Besides the
// connections of db its statements use, a Client holds two of its own
// however many kinds and queues it has: one listening for wake-ups, one
// for the heartbeats of every queue's leases. Make one with NewClient,
// Register its kinds, Start it, and Stop it. All methods are safe for
// concurrent use.
type Client struct {
	db     *pgxpool.Pool
	sh     *shared
	queues map[string]*clientQueue // never changed after NewClient
	names  []string                // the queues' names, sorted
	mw     []leaserouter.Middleware
	hooks  contract.HookLock // held by each OnEvent call: serial across queues
	bg     sync.WaitGroup    // the listener
	idle   *waker            // broadcast when a queue's claim finds no job: Drained counts again

	// life is the Client's lifecycle (New, Started, Stopped) and the
	// registered kinds' names (life.Kinds: the claim's arms). Its lock
	// guards the fields below: they are written only under it, by
	// Register (kind.go) and Start, and not after Start.
	life  *contract.Lifecycle
	kinds []kindRunner                                                                              // by claim arm: kinds[i] is the i-th registered
	chain func(ctx context.Context, a leaserouter.Attempt, inner func(context.Context) error) error // Start's; nil without middleware
}

// clientQueue is one queue of a Client.
type clientQueue struct {
	r       *Router[json.RawMessage]
	workers int
	timeout time.Duration
	admin   Queue
}

// NewClient returns a Client on db with the queues of opts, which accepts
// jobs (Kind.Enqueue) at once and runs them from Start. It checks db and
// every queue's options as New does, a queue's Options merged over the
// client's field by field: a bad field, a negative Workers (or above
// leaserouter.MaxWorkers) or Timeout, an invalid queue name, or a nil
// Middleware returns an error wrapping leaserouter.ErrInvalidOptions that
// names the field and the queue; an older schema wraps
// ErrSchemaOutdated; others wrap the driver's. It starts nothing then.
// Otherwise it starts each queue's background loops (see New) and the
// listener: call Stop, even if the Client never started. A nil ctx means
// context.Background().
func NewClient(ctx context.Context, db *pgxpool.Pool, opts ClientOptions) (*Client, error) {
	ctx = orBackground(ctx)
	if db == nil {
		return nil, fmt.Errorf("%w: nil pool", leaserouter.ErrInvalidOptions)
	}
	queues := opts.Queues
	if len(queues) == 0 {
		queues = map[string]QueueConfig{DefaultQueue: {}}
	}
	c := &Client{
		db:     db,
		queues: make(map[string]*clientQueue, len(queues)),
		names:  slices.Sorted(maps.Keys(queues)),
		mw:     slices.Clone(opts.Middleware),
		hooks:  contract.NewHookLock(),
		life:   contract.NewLifecycle(leaserouter.ErrInvalidOptions, leaserouter.ErrClosed),
		idle:   newWaker(),
	}
	for i, m := range c.mw {
		if m == nil {
			return nil, fmt.Errorf("%w: Middleware[%d] is nil", leaserouter.ErrInvalidOptions, i)
		}
	}
	merged := make([]Options, len(c.names))
	var floor leaserouter.Token
	for i, name := range c.names {
		o, err := c.queueOptions(name, queues[name], opts.Options, i == 0)
		if err != nil {
			return nil, err
		}
		merged[i], floor = o, max(floor, o.TokenFloor)
	}
	if err := readCommittedByDefault(ctx, db); err != nil {
		return nil, err
	}
	if err := schemaReady(ctx, db, merged[0].Schema, floor); err != nil {
		return nil, err
	}
	c.sh = newShared(db, merged[0].Schema)
	c.sh.start(&c.bg)
	for i, name := range c.names {
		c.sh.add(name, c.idle) // Drained counts again at each notification of the Client's queues
		qc := queues[name]
		r := newRouter[json.RawMessage](db, merged[i], c.sh)
		r.onIdle = c.idle.broadcast
		q := &clientQueue{r: r, workers: cmp.Or(qc.Workers, DefaultQueueWorkers), timeout: qc.Timeout}
		q.admin = Queue{r: r}
		c.queues[name] = q
	}
	return c, nil
}

// queueOptions checks queue name's configuration and returns its Options,
// qc.Options over base, with defaults.
func (c *Client) queueOptions(name string, qc QueueConfig, base Options, first bool) (Options, error) {
	if err := contract.CheckKindName(leaserouter.ErrInvalidOptions, "queue", name); err != nil {
		return Options{}, err
	}
	if qc.Workers < 0 || qc.Workers > leaserouter.MaxWorkers {
		return Options{}, fmt.Errorf("%w: queue %s: Workers is %d, must be in [0, %d] (0 = DefaultQueueWorkers)",
			leaserouter.ErrInvalidOptions, contract.Quote(name), qc.Workers, leaserouter.MaxWorkers)
	}
	if qc.Timeout < 0 {
		return Options{}, fmt.Errorf("%w: queue %s: Timeout is %v, must be >= 0 (0 = none)",
			leaserouter.ErrInvalidOptions, contract.Quote(name), qc.Timeout)
	}
	if qc.Options.Schema != "" && qc.Options.Schema != base.Schema {
		return Options{}, fmt.Errorf("%w: queue %s: Schema %q differs from the Client's %q (one Client, one schema)",
			leaserouter.ErrInvalidOptions, contract.Quote(name), qc.Options.Schema, base.Schema)
	}
	o := qc.Options.over(base)
	o.Queue, o.Kind = name, ""
	o.NoVacuum = base.NoVacuum || !first // one vacuum loop per Client
	o.OnEvent = contract.SerialHook(c.hooks, o.OnEvent)
	if o.Logger != nil {
		o.Logger = o.Logger.With("queue", name)
	}
	o, err := o.withDefaults()
	if err != nil {
		return Options{}, fmt.Errorf("%w (queue %s)", err, contract.Quote(name))
	}
	return o, nil
}

// over is o with each zero field taken from base; PollInterval is
// base's.
func (o Options) over(base Options) Options {
	o.LeaseDuration = cmp.Or(o.LeaseDuration, base.LeaseDuration)
	o.MaxAttempts = cmp.Or(o.MaxAttempts, base.MaxAttempts)
	o.Retention = cmp.Or(o.Retention, base.Retention)
	o.TokenFloor = cmp.Or(o.TokenFloor, base.TokenFloor)
	o.PollInterval = base.PollInterval
	o.Schema = base.Schema
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
// still needed to release what the Client holds). A Client with no kind
// registered runs nothing. It returns an error wrapping
// leaserouter.ErrInvalidOptions if the Client was started before, and
// leaserouter.ErrClosed after Stop; it starts nothing then. A nil ctx
// means context.Background(); a Client not made by NewClient (nil, or a
// zero Client) returns an error wrapping leaserouter.ErrInvalidOptions.
func (c *Client) Start(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	ctx = orBackground(ctx)
	host, _ := os.Hostname() // a system call: not under the lifecycle's lock
	return c.life.Start(func(kinds []string) []func() error {
		if len(c.mw) > 0 {
			c.chain = contract.Chain[leaserouter.Middleware, leaserouter.Attempt](c.mw)
		}
		if len(kinds) == 0 {
			return nil
		}
		runs := make([]func() error, len(c.names))
		for i, name := range c.names {
			q := c.queues[name]
			q.r.serveKinds(kinds)
			opts := leaserouter.WorkerOptions{Workers: q.workers, Timeout: q.timeout,
				WorkerID: fmt.Sprintf("%s-%d-%s", cmp.Or(host, "pgrouter"), os.Getpid(), name)}
			runs[i] = func() error {
				if err := q.r.Run(ctx, opts, c.dispatch); err != nil {
					return fmt.Errorf("%w (queue %s)", err, contract.Quote(name))
				}
				return nil
			}
		}
		return runs
	})
}

// dispatch runs l's handler: its kind's (the claim's arm indexes the
// kinds), with a view of l typed for it. Workers call it without c.mu:
// c.kinds is not written after Start.
func (c *Client) dispatch(ctx context.Context, l *Lease[json.RawMessage]) error {
	return c.kinds[l.arm].serve(ctx, c.chain, l)
}

// Stop stops the Client: every queue, concurrently, stops leasing jobs
// (the jobs a worker leased and had not started are handed back, the
// attempt not counted) and refuses new ones (Enqueue returns
// leaserouter.ErrClosed, from a handler too); handlers running go on
// until they return or ctx is done; then the leases still held are
// revoked (their jobs pending again at once, the attempt counted) and
// the queues close as Router.Close does, events delivered; the listening
// and heartbeat connections are closed. Stop returns once every handler
// has returned and the queues are closed, nil; or ctx.Err() when ctx is
// done first, within about 100 ms of its end (a handler that ignores its
// canceled ctx is then left running, and its lease refused). Calling Stop
// again, or concurrently, waits until ctx is done for the first call to
// finish and returns nil. Stop of a Client never started closes its
// queues. OnEvent, a handler, and a periodic job's Payload or Schedule
// must not call Stop (each would wait for itself until ctx is done: call
// it from another goroutine). Jobs not run stay in the table for
// the next process. A nil ctx means context.Background(); a Client not
// made by NewClient (nil, or a zero Client) returns an error wrapping
// leaserouter.ErrInvalidOptions.
func (c *Client) Stop(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	ctx = orBackground(ctx)
	return c.life.Stop(ctx, c.closeAll, func() {
		c.sh.close()
		c.bg.Wait() // the listener ends as its connection's wait is canceled
		c.idle.broadcast()
	})
}

// closeAll closes every queue at once, so that Stop's bound is ctx's
// however many queues there are, and returns the first error.
func (c *Client) closeAll(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.names))
	for i, name := range c.names {
		q := c.queues[name]
		wg.Go(func() { errs[i] = q.r.Close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// check returns an error wrapping leaserouter.ErrInvalidOptions for a
// Client NewClient did not make (nil, or a zero Client: no queues, no
// channels; its calls would panic).
func (c *Client) check() error {
	if c == nil || c.queues == nil {
		return fmt.Errorf("%w: a Client not made by NewClient", leaserouter.ErrInvalidOptions)
	}
	return nil
}

// Queue returns the admin API of the queue named name (List, Retry,
// Pause, ...), or nil if the Client has no such queue (or was not made by
// NewClient). A nil *Queue's calls return errors wrapping
// leaserouter.ErrInvalidOptions, or zero answers.
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

// QueueStats returns each queue's Stats (Router.Stats), in the order of
// QueueNames, or the first error (the driver's, or ctx's). It works after
// Stop. (Client is a leaserouter.StatsReader.) A nil ctx means
// context.Background(); a Client not made by NewClient (nil, or a zero
// Client) returns an error wrapping leaserouter.ErrInvalidOptions.
func (c *Client) QueueStats(ctx context.Context) ([]leaserouter.QueueStats, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	ctx = orBackground(ctx)
	s := make([]leaserouter.QueueStats, len(c.names))
	for i, name := range c.names {
		st, err := c.queues[name].r.Stats(ctx)
		if err != nil {
			return nil, err
		}
		s[i] = leaserouter.QueueStats{Queue: name, Stats: st}
	}
	return s, nil
}

// serveKinds makes r's claims serve kinds, in this order (the claim's
// arms: Lease.arm indexes kinds): a Client's queue, at Start.
func (r *Router[T]) serveKinds(kinds []string) { r.serving.Store(&kinds) }

// claimKinds is the kinds r's claims serve: a Client queue's registered
// kinds, or Options.kinds.
func (r *Router[T]) claimKinds() []string {
	if k := r.serving.Load(); k != nil {
		return *k
	}
	return r.opts.kinds
}
