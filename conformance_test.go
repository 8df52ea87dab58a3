package leaserouter_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/hook"
	"github.com/leaserouter/leaserouter/internal/routertest"
)

// TestConformance runs the conformance suite (internal/routertest: the
// contract's rules as rows, and its linearizability check) against the
// in-process Router, each test in a synctest bubble.
func TestConformance(t *testing.T) { routertest.Run(t, coreHarness{}) }

// coreHarness is the in-process Router as a routertest backend: one
// Router per job set, time driven by synctest.
type coreHarness struct{}

func (coreHarness) Name() string { return "the in-process Router" }

func (coreHarness) Caps() routertest.Caps {
	return routertest.Caps{ExactClock: true, Capacity: true, SerialClaims: true, ForcedExpiry: true, Totals: true, Audit: true}
}

// KeptIntervals reads the core's keepers of l (export_test.go).
func (coreHarness) KeptIntervals(l routertest.Lease) []time.Duration {
	return leaserouter.KeptIntervals(l.(coreLease).l)
}

// StallHeartbeats holds the next call that takes b's lock (the next
// heartbeat, in a row that makes no other call meanwhile) inside the lock,
// by a test hook, until release.
func (coreHarness) StallHeartbeats(_ routertest.T, b routertest.Backend) (<-chan struct{}, func()) {
	var hold atomic.Bool
	stalled, freed := make(chan struct{}), make(chan struct{})
	leaserouter.SetHooks(b.(coreBackend).r, &hook.Hooks{Locked: func() {
		if hold.CompareAndSwap(true, false) {
			close(stalled)
			<-freed
		}
	}})
	hold.Store(true)
	var once sync.Once
	return stalled, func() { once.Do(func() { close(freed) }) }
}

func (coreHarness) Scope(t *testing.T, f func(t *testing.T)) { synctest.Test(t, f) }

func (coreHarness) Lease() time.Duration { return 10 * time.Second }

func (coreHarness) Workload() routertest.LinConfig {
	return routertest.LinConfig{Ops: 4000, MinCount: 50}
}

// Advance sleeps in the bubble: the clock moves once every goroutine of
// the bubble is blocked.
func (coreHarness) Advance(d time.Duration) { time.Sleep(d) }

func (h coreHarness) options(cfg routertest.Config) leaserouter.Options {
	backoff := cfg.Backoff
	if backoff == nil {
		backoff = func(int) time.Duration { return 0 }
	}
	return leaserouter.Options{
		LeaseDuration: cmpOr(cfg.LeaseDuration, h.Lease()),
		MaxAttempts:   cfg.MaxAttempts,
		Backoff:       backoff,
		Retention:     cfg.Retention,
		Capacity:      cfg.Capacity,
		TokenFloor:    cfg.TokenFloor,
		OnEvent:       cfg.OnEvent,
		Logger:        cfg.Logger,
	}
}

func (h coreHarness) New(_ routertest.T, cfg routertest.Config) error {
	r, err := leaserouter.New[string](h.options(cfg))
	if err == nil {
		err = r.Close(context.Background())
	}
	return err
}

// Open returns one Router n times: the in-process job set has one handle.
func (h coreHarness) Open(t routertest.T, cfg routertest.Config, n int) []routertest.Backend {
	t.Helper()
	r, err := leaserouter.New[string](h.options(cfg))
	if err != nil {
		t.Errorf("New: %v", err)
		t.FailNow()
	}
	t.Cleanup(func() {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_ = r.Close(done) // revokes what is still held
	})
	bs := make([]routertest.Backend, n)
	for i := range bs {
		bs[i] = coreBackend{r}
	}
	return bs
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// coreBackend adapts *leaserouter.Router[string]; ctx is ignored where
// the core takes none.
type coreBackend struct{ r *leaserouter.Router[string] }

func (b coreBackend) Enqueue(_ context.Context, id, payload string, opts ...leaserouter.EnqueueOption) error {
	return b.r.Enqueue(id, payload, opts...)
}

func (b coreBackend) EnqueueMany(_ context.Context, jobs []leaserouter.JobSpec[string]) ([]int, error) {
	return b.r.EnqueueMany(jobs)
}

func (b coreBackend) Acquire(ctx context.Context, worker string) (routertest.Lease, error) {
	return coreLease1(b.r.Acquire(ctx, worker))
}

func (b coreBackend) TryAcquire(_ context.Context, worker string) (routertest.Lease, error) {
	return coreLease1(b.r.TryAcquire(worker))
}

func (b coreBackend) AcquireMany(ctx context.Context, worker string, max int) ([]routertest.Lease, error) {
	return coreLeases(b.r.AcquireMany(ctx, worker, max))
}

func (b coreBackend) TryAcquireMany(_ context.Context, worker string, max int) ([]routertest.Lease, error) {
	return coreLeases(b.r.TryAcquireMany(worker, max))
}

func (b coreBackend) Get(_ context.Context, id string) (leaserouter.Job[string], bool, error) {
	j, ok := b.r.Get(id)
	return j, ok, nil
}

func (b coreBackend) Cancel(_ context.Context, id string) error { return b.r.Cancel(id) }

func (b coreBackend) Stats(context.Context) (leaserouter.Stats, error) { return b.r.Stats(), nil }

func (b coreBackend) List(_ context.Context, p leaserouter.ListParams) (leaserouter.JobPage[string], error) {
	return b.r.List(p)
}

func (b coreBackend) Retry(_ context.Context, id string) error  { return b.r.Retry(id) }
func (b coreBackend) RunNow(_ context.Context, id string) error { return b.r.RunNow(id) }
func (b coreBackend) Delete(_ context.Context, id string) error { return b.r.Delete(id) }
func (b coreBackend) Pause(context.Context) error               { return b.r.Pause() }
func (b coreBackend) Resume(context.Context) error              { return b.r.Resume() }

func (b coreBackend) Leases(_ context.Context, limit int) ([]leaserouter.Job[string], error) {
	return b.r.Leases(limit)
}

func (b coreBackend) AddPeriodic(_ context.Context, p leaserouter.Periodic[string]) error {
	return b.r.AddPeriodic(p)
}

func (b coreBackend) RemovePeriodic(name string) error { return b.r.RemovePeriodic(name) }

func (b coreBackend) History(context.Context) ([]leaserouter.Minute, error) {
	return b.r.History(), nil
}

func (b coreBackend) Run(ctx context.Context, opts leaserouter.WorkerOptions, h routertest.Handler) error {
	if h == nil {
		return b.r.Run(ctx, opts, nil)
	}
	return b.r.Run(ctx, opts, func(ctx context.Context, l *leaserouter.Lease[string]) error { return h(ctx, coreLease{l}) })
}

func (b coreBackend) KeepAlive(ctx context.Context, l routertest.Lease, interval time.Duration) (context.Context, context.CancelFunc) {
	switch l {
	case nil:
		return leaserouter.KeepAlive[string](ctx, nil, interval)
	case routertest.ZeroLease:
		return leaserouter.KeepAlive(ctx, &leaserouter.Lease[string]{}, interval)
	}
	return leaserouter.KeepAlive(ctx, l.(coreLease).l, interval)
}

func (b coreBackend) Close(ctx context.Context) error { return b.r.Close(ctx) }

// ExpireNow forces the expiry by the test hook (export_test.go):
// routertest.Expirer.
func (b coreBackend) ExpireNow(_ context.Context, id string) bool {
	return leaserouter.ExpireNow(b.r, id)
}

// Audit is Router.Audit: routertest.Auditor.
func (b coreBackend) Audit(context.Context) error { return b.r.Audit() }

func coreLease1(l *leaserouter.Lease[string], err error) (routertest.Lease, error) {
	if err != nil {
		return nil, err
	}
	return coreLease{l}, nil
}

func coreLeases(ls []*leaserouter.Lease[string], err error) ([]routertest.Lease, error) {
	if err != nil {
		return nil, err
	}
	out := make([]routertest.Lease, len(ls))
	for i, l := range ls {
		out[i] = coreLease{l}
	}
	return out, nil
}

// coreLease adapts *leaserouter.Lease[string].
type coreLease struct{ l *leaserouter.Lease[string] }

func (c coreLease) JobID() string                               { return c.l.JobID }
func (c coreLease) Payload() string                             { return c.l.Payload }
func (c coreLease) Attempt() int                                { return c.l.Attempt }
func (c coreLease) Token() leaserouter.Token                    { return c.l.Token }
func (c coreLease) WorkerID() string                            { return c.l.WorkerID }
func (c coreLease) Progress() []byte                            { return c.l.Progress }
func (c coreLease) Metadata() map[string]string                 { return c.l.Metadata() }
func (c coreLease) Expiry() time.Time                           { return c.l.Expiry() }
func (c coreLease) Heartbeat(_ context.Context, p []byte) error { return c.l.Heartbeat(p) }
func (c coreLease) Complete(context.Context) error              { return c.l.Complete() }
func (c coreLease) Fail(_ context.Context, cause error) error   { return c.l.Fail(cause) }
func (c coreLease) Release(context.Context) error               { return c.l.Release() }

func (c coreLease) Snooze(_ context.Context, d time.Duration) error { return c.l.Snooze(d) }

func (b coreBackend) RetryMany(_ context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	return b.r.RetryMany(ids, states)
}

func (b coreBackend) CancelMany(_ context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	return b.r.CancelMany(ids, states)
}

func (b coreBackend) DeleteMany(_ context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	return b.r.DeleteMany(ids, states)
}

func (b coreBackend) LeasePage(_ context.Context, p leaserouter.LeasesParams) (leaserouter.JobPage[string], error) {
	return b.r.LeasePage(p)
}
