package leaserouter_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/routertest"
)

// TestClientConformance runs the Client's rows of the conformance suite
// (internal/routertest's ClientRows) against the core Client, each in a
// synctest bubble.
func TestClientConformance(t *testing.T) { routertest.RunClient(t, coreClientHarness{}) }

// coreClientHarness is the core Client as a routertest ClientHarness.
type coreClientHarness struct{}

func (coreClientHarness) Name() string { return "the in-process Client" }

// Caps: an in-process Client's job set is its own (no SharedClients).
func (coreClientHarness) Caps() routertest.Caps {
	return routertest.Caps{ExactClock: true, Capacity: true, SerialClaims: true, Totals: true, Audit: true}
}

func (coreClientHarness) Scope(t *testing.T, f func(t *testing.T)) { synctest.Test(t, f) }

func (coreClientHarness) Advance(d time.Duration) { time.Sleep(d) }

func (coreClientHarness) Lease() time.Duration { return 10 * time.Second }

func (h coreClientHarness) NewClient(t routertest.T, cfg routertest.ClientConfig) (routertest.Client, error) {
	opts := leaserouter.ClientOptions{Options: coreHarness{}.options(cfg.Config), Middleware: cfg.Middleware}
	if cfg.Queues != nil {
		opts.Queues = map[string]leaserouter.QueueConfig{}
		for name, q := range cfg.Queues {
			opts.Queues[name] = leaserouter.QueueConfig{Workers: q.Workers, Timeout: q.Timeout, Options: queueOptions(q.Config)}
		}
	}
	c, err := leaserouter.NewClient(opts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Stop(done) // revokes what is still held
		for _, q := range c.QueueNames() {
			if err := c.Queue(q).Audit(); err != nil {
				t.Errorf("Audit of queue %s: %v", q, err)
			}
		}
	})
	return coreClient{c}, nil
}

// Peer: no SharedClients in process.
func (coreClientHarness) Peer(t routertest.T, _ routertest.Client, _ routertest.ClientConfig) (routertest.Client, error) {
	t.Errorf("the in-process Client has no peers")
	t.FailNow()
	return nil, nil
}

// queueOptions is a queue's override: its zero fields stay zero (the
// client's), unlike a Router's Config.
func queueOptions(cfg routertest.Config) leaserouter.Options {
	return leaserouter.Options{
		LeaseDuration: cfg.LeaseDuration, MaxAttempts: cfg.MaxAttempts, Backoff: cfg.Backoff,
		Retention: cfg.Retention, Capacity: cfg.Capacity, TokenFloor: cfg.TokenFloor,
		OnEvent: cfg.OnEvent, Logger: cfg.Logger,
	}
}

// coreClient adapts *leaserouter.Client; ctx is ignored where the core
// takes none.
type coreClient struct{ c *leaserouter.Client }

func (c coreClient) Register(kind string, h routertest.Handler, opts ...leaserouter.KindOption) (routertest.Kind, error) {
	var hd leaserouter.Handler[string]
	if h != nil {
		hd = func(ctx context.Context, l *leaserouter.Lease[string]) error { return h(ctx, coreLease{l}) }
	}
	k, err := leaserouter.Register(c.c, kind, hd, opts...)
	if err != nil {
		return nil, err
	}
	return coreKind{k}, nil
}

func (c coreClient) Start(ctx context.Context) error   { return c.c.Start(ctx) }
func (c coreClient) Stop(ctx context.Context) error    { return c.c.Stop(ctx) }
func (c coreClient) Drained(ctx context.Context) error { return c.c.Drained(ctx) }
func (c coreClient) QueueNames() []string              { return c.c.QueueNames() }

func (c coreClient) Queue(name string) routertest.QueueAdmin {
	if q := c.c.Queue(name); q != nil {
		return coreQueue{q}
	}
	return nil
}

func (c coreClient) QueueStats(ctx context.Context) ([]leaserouter.QueueStats, error) {
	return c.c.QueueStats(ctx)
}

type coreKind struct{ k *leaserouter.Kind[string] }

func (k coreKind) Name() string  { return k.k.Name() }
func (k coreKind) Queue() string { return k.k.Queue() }

func (k coreKind) Enqueue(ctx context.Context, id, payload string, opts ...leaserouter.EnqueueOption) error {
	return k.k.Enqueue(ctx, id, payload, opts...)
}

func (k coreKind) EnqueueMany(ctx context.Context, specs []leaserouter.JobSpec[string]) ([]int, error) {
	return k.k.EnqueueMany(ctx, specs)
}

func (k coreKind) AddPeriodic(_ context.Context, p leaserouter.Periodic[string]) error {
	return k.k.AddPeriodic(p)
}

func (k coreKind) RemovePeriodic(name string) error { return k.k.RemovePeriodic(name) }

// coreQueue adapts *leaserouter.Queue, its payloads (the Kinds' strings)
// as strings.
type coreQueue struct{ q *leaserouter.Queue }

func (q coreQueue) Name() string { return q.q.Name() }

func (q coreQueue) Get(_ context.Context, id string) (leaserouter.Job[string], bool, error) {
	j, ok := q.q.Get(id)
	return stringJob(j), ok, nil
}

func (q coreQueue) List(_ context.Context, p leaserouter.ListParams) (leaserouter.JobPage[string], error) {
	page, err := q.q.List(p)
	out := leaserouter.JobPage[string]{NextCursor: page.NextCursor}
	for _, j := range page.Jobs {
		out.Jobs = append(out.Jobs, stringJob(j))
	}
	return out, err
}

func (q coreQueue) Stats(context.Context) (leaserouter.Stats, error) { return q.q.Stats(), nil }
func (q coreQueue) Retry(_ context.Context, id string) error         { return q.q.Retry(id) }
func (q coreQueue) Cancel(_ context.Context, id string) error        { return q.q.Cancel(id) }

func stringJob(j leaserouter.Job[any]) leaserouter.Job[string] {
	p, _ := j.Payload.(string)
	return leaserouter.Job[string]{
		ID: j.ID, Payload: p, State: j.State, Priority: j.Priority, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		Token: j.Token, Owner: j.Owner, LeaseExpiry: j.LeaseExpiry, RunAt: j.RunAt, Progress: j.Progress,
		LastError: j.LastError, Timeout: j.Timeout, Kind: j.Kind, Metadata: j.Metadata, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt,
	}
}
