package pgrouter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/routertest"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestConformance runs the conformance suite (internal/routertest: the
// contract's rules as rows, and its linearizability check) against
// pgrouter, each job set a fresh database, time the database's own.
func TestConformance(t *testing.T) { routertest.Run(t, pgHarness{}) }

// TestConformanceInASchema runs the conformance suite against Routers
// of Options.Schema, on pools whose search_path names no schema: a
// statement naming an object of pgrouter's unqualified fails there.
func TestConformanceInASchema(t *testing.T) {
	routertest.Run(t, pgHarness{schema: "Conformance Schema"})
}

// TestListUnderDebianCollation runs the List rows on databases of
// collation C.UTF-8 (Debian's default), not the test cluster's C. Its
// order is code point order, the same as byte order in UTF-8, so an ID
// prefix is a range of the primary key here too:
// TestListUnderICUCollation is the run where it is not.
func TestListUnderDebianCollation(t *testing.T) {
	h := pgHarness{locale: "C.UTF-8"}
	for _, row := range []string{"admin/List pages newest first, keyset: nothing skipped or repeated",
		"admin/List's IDPrefix is a literal byte prefix",
		"admin/List with OmitPayload and Leases carry no payload or checkpoint; Get does",
		"admin/calls settle first: an expired lease listed as expired, a job past retention gone"} {
		t.Run(row, func(t *testing.T) { routertest.RunRow(t, h, row) })
	}
}

// TestListUnderICUCollation runs the List rows on databases whose
// collation is ICU's root locale, where the IDs with a prefix are not
// one range of the database's order (it orders "B" between "a" and "c"
// and ignores punctuation at first): List's prefix must read them in
// byte order (COLLATE "C").
func TestListUnderICUCollation(t *testing.T) {
	h := pgHarness{icu: "und"}
	for _, row := range []string{"admin/List pages newest first, keyset: nothing skipped or repeated",
		"admin/List's IDPrefix is a literal byte prefix"} {
		t.Run(row, func(t *testing.T) { routertest.RunRow(t, h, row) })
	}
}

// pgHarness is pgrouter as a routertest backend: a fresh database per job
// set, n Routers on it for n handles (n processes, as far as the database
// can tell), real time; locale, when not "", is the databases' collation
// (pgtest.NewLocale).
type pgHarness struct {
	locale string
	icu    string // when not "", the databases' ICU collation (pgtest.NewICULocale)
	schema string // when not "", Options.Schema, on pools whose search_path finds nothing (schemaDB)
}

func (pgHarness) Name() string { return "pgrouter" }

// Caps: what the backends declare as differing. No ForcedExpiry
// (leases expire by the database's clock only) and no Audit; Totals,
// since each Router counts every call made on it and Stats works after
// Close (the suite sums the handles').
func (pgHarness) Caps() routertest.Caps {
	return routertest.Caps{MinLeaseDuration: pgrouter.MinLeaseDuration, Totals: true}
}

// KeptIntervals reads pgrouter's keepers of l (export_contract_test.go).
func (pgHarness) KeptIntervals(l routertest.Lease) []time.Duration {
	return pgrouter.KeptIntervals(l.(pgLease).l)
}

// StallHeartbeats holds the jobs table in another transaction (LOCK
// TABLE), so the next heartbeat statement waits for the lock; stalled is
// closed once a heartbeat statement waits (pg_stat_activity: its text,
// whose head comment names it, waiting for a lock).
func (h pgHarness) StallHeartbeats(t routertest.T, b routertest.Backend) (<-chan struct{}, func()) {
	tb := t.(*testing.T)
	db := b.(pgBackend).db
	tx, err := db.Begin(tb.Context())
	if err == nil {
		_, err = tx.Exec(tb.Context(), "LOCK TABLE "+h.qualified("leaserouter_jobs")+" IN ACCESS EXCLUSIVE MODE")
	}
	if err != nil {
		tb.Fatalf("StallHeartbeats: %v", err)
	}
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	tb.Cleanup(release)
	stalled := make(chan struct{})
	go func() {
		for {
			var n int
			err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND (query LIKE '%heartbeat round of Run or KeepAlive%' OR query LIKE '%Extends lease @token%' OR query LIKE '%Extends lease $%')`).Scan(&n)
			if err != nil || n > 0 {
				close(stalled)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return stalled, release
}

func (pgHarness) Scope(t *testing.T, f func(t *testing.T)) { f(t) }

// Lease is long enough for a row's few round trips on a busy machine
// under -race, short enough that waiting for an expiry costs little.
func (pgHarness) Lease() time.Duration { return time.Second }

// Workload: leases of 250ms on set A (zombies' expire), 1s on Run's.
func (pgHarness) Workload() routertest.LinConfig { return routertest.LinConfig{Ops: 2500} }

// Advance waits in real time: the database's clock is the machine's.
func (pgHarness) Advance(d time.Duration) { time.Sleep(d) }

func (h pgHarness) New(t routertest.T, cfg routertest.Config) error {
	tb := t.(*testing.T) // rows on PostgreSQL run under *testing.T (pgtest, routerOn)
	r, err := pgrouter.New[string](tb.Context(), h.database(tb), h.options(cfg))
	if err == nil {
		err = r.Close(context.Background())
	}
	return err
}

func (h pgHarness) Open(t routertest.T, cfg routertest.Config, n int) []routertest.Backend {
	t.Helper()
	tb := t.(*testing.T) // rows on PostgreSQL run under *testing.T (pgtest, routerOn)
	db := h.database(tb)
	opts := h.options(cfg)
	bs := make([]routertest.Backend, n)
	for i := range bs {
		bs[i] = pgBackend{routerOn[string](tb, db, opts), db}
	}
	return bs
}

// database is a fresh database for one job set.
func (h pgHarness) database(t *testing.T) *pgxpool.Pool {
	if h.schema != "" {
		db, _ := schemaDB(t, h.schema)
		return db
	}
	if h.icu != "" {
		return pgtest.NewICULocale(t, h.icu)
	}
	if h.locale != "" {
		return pgtest.NewLocale(t, h.locale)
	}
	return pgtest.New(t)
}

func (h pgHarness) options(cfg routertest.Config) pgrouter.Options {
	backoff := cfg.Backoff
	if backoff == nil {
		backoff = func(int) time.Duration { return 0 }
	}
	lease := cfg.LeaseDuration
	if lease == 0 {
		lease = h.Lease()
	}
	return pgrouter.Options{
		LeaseDuration: lease,
		MaxAttempts:   cfg.MaxAttempts,
		Backoff:       backoff,
		Retention:     cfg.Retention,
		TokenFloor:    cfg.TokenFloor,
		OnEvent:       cfg.OnEvent,
		Logger:        cfg.Logger,
		PollInterval:  100 * time.Millisecond,
		Schema:        h.schema,
	}
}

// qualified is the object name in the harness's schema.
func (h pgHarness) qualified(name string) string {
	if h.schema == "" {
		return name
	}
	return pgx.Identifier{h.schema, name}.Sanitize()
}

// pgBackend adapts *pgrouter.Router[string] on database db.
type pgBackend struct {
	r  *pgrouter.Router[string]
	db *pgxpool.Pool
}

func (b pgBackend) Enqueue(ctx context.Context, id, payload string, opts ...leaserouter.EnqueueOption) error {
	return b.r.Enqueue(ctx, id, payload, opts...)
}

func (b pgBackend) EnqueueMany(ctx context.Context, jobs []leaserouter.JobSpec[string]) ([]int, error) {
	return b.r.EnqueueMany(ctx, jobs)
}

func (b pgBackend) Acquire(ctx context.Context, worker string) (routertest.Lease, error) {
	return pgLease1(b.r.Acquire(ctx, worker))
}

func (b pgBackend) TryAcquire(ctx context.Context, worker string) (routertest.Lease, error) {
	return pgLease1(b.r.TryAcquire(ctx, worker))
}

func (b pgBackend) AcquireMany(ctx context.Context, worker string, max int) ([]routertest.Lease, error) {
	return pgLeases(b.r.AcquireMany(ctx, worker, max))
}

func (b pgBackend) TryAcquireMany(ctx context.Context, worker string, max int) ([]routertest.Lease, error) {
	return pgLeases(b.r.TryAcquireMany(ctx, worker, max))
}

func (b pgBackend) Get(ctx context.Context, id string) (leaserouter.Job[string], bool, error) {
	return b.r.Get(ctx, id)
}

func (b pgBackend) Cancel(ctx context.Context, id string) error { return b.r.Cancel(ctx, id) }

func (b pgBackend) Stats(ctx context.Context) (leaserouter.Stats, error) { return b.r.Stats(ctx) }

func (b pgBackend) Run(ctx context.Context, opts leaserouter.WorkerOptions, h routertest.Handler) error {
	if h == nil {
		return b.r.Run(ctx, opts, nil)
	}
	return b.r.Run(ctx, opts, func(ctx context.Context, l *pgrouter.Lease[string]) error { return h(ctx, pgLease{l}) })
}

func (b pgBackend) KeepAlive(ctx context.Context, l routertest.Lease, interval time.Duration) (context.Context, context.CancelFunc) {
	switch l {
	case nil:
		return pgrouter.KeepAlive[string](ctx, nil, interval)
	case routertest.ZeroLease:
		return pgrouter.KeepAlive(ctx, &pgrouter.Lease[string]{}, interval)
	}
	return pgrouter.KeepAlive(ctx, l.(pgLease).l, interval)
}

func (b pgBackend) Close(ctx context.Context) error { return b.r.Close(ctx) }

func (b pgBackend) List(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[string], error) {
	return b.r.List(ctx, p)
}

func (b pgBackend) Retry(ctx context.Context, id string) error  { return b.r.Retry(ctx, id) }
func (b pgBackend) RunNow(ctx context.Context, id string) error { return b.r.RunNow(ctx, id) }
func (b pgBackend) Delete(ctx context.Context, id string) error { return b.r.Delete(ctx, id) }
func (b pgBackend) Pause(ctx context.Context) error             { return b.r.Pause(ctx) }
func (b pgBackend) Resume(ctx context.Context) error            { return b.r.Resume(ctx) }

func (b pgBackend) Leases(ctx context.Context, limit int) ([]leaserouter.Job[string], error) {
	return b.r.Leases(ctx, limit)
}

func (b pgBackend) AddPeriodic(ctx context.Context, p leaserouter.Periodic[string]) error {
	return b.r.AddPeriodic(ctx, p)
}

func (b pgBackend) RemovePeriodic(name string) error { return b.r.RemovePeriodic(name) }

func (b pgBackend) History(ctx context.Context) ([]leaserouter.Minute, error) {
	return b.r.History(ctx)
}

func pgLease1(l *pgrouter.Lease[string], err error) (routertest.Lease, error) {
	if err != nil {
		return nil, err
	}
	return pgLease{l}, nil
}

func pgLeases(ls []*pgrouter.Lease[string], err error) ([]routertest.Lease, error) {
	if err != nil {
		return nil, err
	}
	out := make([]routertest.Lease, len(ls))
	for i, l := range ls {
		out[i] = pgLease{l}
	}
	return out, nil
}

// pgLease adapts *pgrouter.Lease[string].
type pgLease struct{ l *pgrouter.Lease[string] }

func (p pgLease) JobID() string               { return p.l.JobID }
func (p pgLease) Payload() string             { return p.l.Payload }
func (p pgLease) Attempt() int                { return p.l.Attempt }
func (p pgLease) Token() leaserouter.Token    { return p.l.Token }
func (p pgLease) WorkerID() string            { return p.l.WorkerID }
func (p pgLease) Metadata() map[string]string { return p.l.Metadata() }
func (p pgLease) Progress() []byte            { return p.l.Progress }
func (p pgLease) Expiry() time.Time           { return p.l.Expiry() }
func (p pgLease) Heartbeat(ctx context.Context, progress []byte) error {
	return p.l.Heartbeat(ctx, progress)
}
func (p pgLease) Complete(ctx context.Context) error          { return p.l.Complete(ctx) }
func (p pgLease) Fail(ctx context.Context, cause error) error { return p.l.Fail(ctx, cause) }
func (p pgLease) Release(ctx context.Context) error           { return p.l.Release(ctx) }
func (p pgLease) Snooze(ctx context.Context, d time.Duration) error {
	return p.l.Snooze(ctx, d)
}

func (b pgBackend) RetryMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	return b.r.RetryMany(ctx, ids, states)
}

func (b pgBackend) CancelMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	return b.r.CancelMany(ctx, ids, states)
}

func (b pgBackend) DeleteMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error) {
	return b.r.DeleteMany(ctx, ids, states)
}

func (b pgBackend) LeasePage(ctx context.Context, p leaserouter.LeasesParams) (leaserouter.JobPage[string], error) {
	return b.r.LeasePage(ctx, p)
}
