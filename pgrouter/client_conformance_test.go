package pgrouter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/routertest"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestClientConformance runs the Client's rows of the conformance suite
// (internal/routertest's ClientRows) against pgrouter's Client, each on
// a fresh database.
func TestClientConformance(t *testing.T) { routertest.RunClient(t, pgClientHarness{}) }

// pgClientHarness is pgrouter's Client as a routertest ClientHarness.
type pgClientHarness struct{}

func (pgClientHarness) Name() string { return "pgrouter's Client" }

// Caps: Clients of many processes share the database's job set.
func (pgClientHarness) Caps() routertest.Caps {
	return routertest.Caps{MinLeaseDuration: pgrouter.MinLeaseDuration, Totals: true, SharedClients: true}
}

func (pgClientHarness) Scope(t *testing.T, f func(t *testing.T)) { f(t) }

// Advance waits in real time: the database's clock is the machine's.
func (pgClientHarness) Advance(d time.Duration) { time.Sleep(d) }

func (pgClientHarness) Lease() time.Duration { return pgHarness{}.Lease() }

func (h pgClientHarness) NewClient(t routertest.T, cfg routertest.ClientConfig) (routertest.Client, error) {
	tb := t.(*testing.T) // rows on PostgreSQL run under *testing.T (pgtest)
	return h.open(tb, pgHarness{}.database(tb), cfg)
}

func (h pgClientHarness) Peer(t routertest.T, c routertest.Client, cfg routertest.ClientConfig) (routertest.Client, error) {
	return h.open(t.(*testing.T), c.(pgClient).db, cfg)
}

// open is NewClient on db, stopped (with a done ctx) when t ends.
func (pgClientHarness) open(t *testing.T, db *pgxpool.Pool, cfg routertest.ClientConfig) (routertest.Client, error) {
	opts := pgrouter.ClientOptions{Options: pgHarness{}.options(cfg.Config), Middleware: cfg.Middleware}
	if cfg.Queues != nil {
		opts.Queues = map[string]pgrouter.QueueConfig{}
		for name, q := range cfg.Queues {
			opts.Queues[name] = pgrouter.QueueConfig{Workers: q.Workers, Timeout: q.Timeout, Options: pgQueueOptions(q.Config)}
		}
	}
	c, err := pgrouter.NewClient(t.Context(), db, opts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Stop(done) // revokes what is still held
	})
	return pgClient{c, db}, nil
}

// pgQueueOptions is a queue's override: its zero fields stay zero (the
// client's), unlike a Router's Config.
func pgQueueOptions(cfg routertest.Config) pgrouter.Options {
	return pgrouter.Options{
		LeaseDuration: cfg.LeaseDuration, MaxAttempts: cfg.MaxAttempts, Backoff: cfg.Backoff,
		Retention: cfg.Retention, TokenFloor: cfg.TokenFloor, OnEvent: cfg.OnEvent, Logger: cfg.Logger,
	}
}

// pgClient adapts *pgrouter.Client on database db.
type pgClient struct {
	c  *pgrouter.Client
	db *pgxpool.Pool
}

func (c pgClient) Register(kind string, h routertest.Handler, opts ...leaserouter.KindOption) (routertest.Kind, error) {
	var hd pgrouter.Handler[string]
	if h != nil {
		hd = func(ctx context.Context, l *pgrouter.Lease[string]) error { return h(ctx, pgLease{l}) }
	}
	k, err := pgrouter.Register(c.c, kind, hd, opts...)
	if err != nil {
		return nil, err
	}
	return pgKind{k}, nil
}

func (c pgClient) Start(ctx context.Context) error   { return c.c.Start(ctx) }
func (c pgClient) Stop(ctx context.Context) error    { return c.c.Stop(ctx) }
func (c pgClient) Drained(ctx context.Context) error { return c.c.Drained(ctx) }
func (c pgClient) QueueNames() []string              { return c.c.QueueNames() }

func (c pgClient) Queue(name string) routertest.QueueAdmin {
	if q := c.c.Queue(name); q != nil {
		return pgQueue{q}
	}
	return nil
}

func (c pgClient) QueueStats(ctx context.Context) ([]leaserouter.QueueStats, error) {
	return c.c.QueueStats(ctx)
}

type pgKind struct{ k *pgrouter.Kind[string] }

func (k pgKind) Name() string  { return k.k.Name() }
func (k pgKind) Queue() string { return k.k.Queue() }

func (k pgKind) Enqueue(ctx context.Context, id, payload string, opts ...leaserouter.EnqueueOption) error {
	return k.k.Enqueue(ctx, id, payload, opts...)
}

func (k pgKind) EnqueueMany(ctx context.Context, specs []leaserouter.JobSpec[string]) ([]int, error) {
	return k.k.EnqueueMany(ctx, specs)
}

func (k pgKind) AddPeriodic(ctx context.Context, p leaserouter.Periodic[string]) error {
	return k.k.AddPeriodic(ctx, p)
}

func (k pgKind) RemovePeriodic(name string) error { return k.k.RemovePeriodic(name) }

// pgQueue adapts *pgrouter.Queue, its payloads (the Kinds' strings, as
// JSON) as strings.
type pgQueue struct{ q *pgrouter.Queue }

func (q pgQueue) Name() string { return q.q.Name() }

func (q pgQueue) Get(ctx context.Context, id string) (leaserouter.Job[string], bool, error) {
	j, ok, err := q.q.Get(ctx, id)
	return stringOf(j), ok, err
}

func (q pgQueue) List(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[string], error) {
	page, err := q.q.List(ctx, p)
	out := leaserouter.JobPage[string]{NextCursor: page.NextCursor}
	for _, j := range page.Jobs {
		out.Jobs = append(out.Jobs, stringOf(j))
	}
	return out, err
}

func (q pgQueue) Stats(ctx context.Context) (leaserouter.Stats, error) { return q.q.Stats(ctx) }
func (q pgQueue) Retry(ctx context.Context, id string) error           { return q.q.Retry(ctx, id) }
func (q pgQueue) Cancel(ctx context.Context, id string) error          { return q.q.Cancel(ctx, id) }

// stringOf is j with its JSON payload (a string, as the rows' kinds
// enqueue) decoded.
func stringOf(j leaserouter.Job[json.RawMessage]) leaserouter.Job[string] {
	var p string
	_ = json.Unmarshal(j.Payload, &p)
	return leaserouter.Job[string]{
		ID: j.ID, Payload: p, State: j.State, Priority: j.Priority, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		Token: j.Token, Owner: j.Owner, LeaseExpiry: j.LeaseExpiry, RunAt: j.RunAt, Progress: j.Progress,
		LastError: j.LastError, Timeout: j.Timeout, Kind: j.Kind, Metadata: j.Metadata, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt,
	}
}
