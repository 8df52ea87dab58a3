// Package routertest is the conformance suite of the leaserouter contract:
// the rules of the contract as named table rows and a porcupine
// linearizability check, written once and run against every backend (the
// in-process Router by the root module's conformance_test.go, PostgreSQL
// by pgrouter/conformance_test.go). River does the same with
// riverdriver/riverdrivertest.
//
// A backend takes part through a Harness: it opens Backends (handles on
// one job set, with the options of a Config), lets time pass on the
// backend's clock (Advance: a synctest sleep for the core, real waiting on
// short leases for PostgreSQL), and declares Caps for what truly differs
// between backends. A row that
// needs a capability the backend lacks is reported as not applicable, by
// name, in the test log: never silently skipped.
//
// Although it is not a _test package (so both modules can import it), it
// is test code: only tests import it. Its dependencies besides the core's
// exported types are testify's require and porcupine
// (github.com/anishathalye/porcupine), both already test dependencies of
// the core, so no program that imports leaserouter links them.
package routertest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/leaserouter/leaserouter"
)

// T is what a row needs of a test: *testing.T satisfies it. Rows take a T
// rather than a *testing.T so that the suite's own tests can run a row
// against a broken backend and observe that it fails.
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	FailNow()
	Failed() bool
	Cleanup(func())
	Context() context.Context
}

// Config is the options a row opens a backend with; zero fields take the
// backend's defaults, except LeaseDuration (zero: Harness.Lease) and
// Backoff (nil: zero backoff, so Fail retries at once).
type Config struct {
	LeaseDuration time.Duration
	MaxAttempts   int
	Backoff       func(attempt int) time.Duration
	Retention     time.Duration
	Capacity      int
	TokenFloor    leaserouter.Token
	OnEvent       func(leaserouter.Event)
	Logger        *slog.Logger
}

// Caps are the declared differences of a backend. A row needing one the backend lacks is logged as
// not applicable, with the difference, and passes.
type Caps struct {
	// ExactClock: Advance moves the backend's clock exactly (synctest), so
	// a row may probe an instant to the nanosecond. PostgreSQL's clock is
	// real (its boundary probes are pgrouter's own tests).
	ExactClock bool
	// Capacity: Options.Capacity is offered (the table is PostgreSQL's
	// queue: no capacity there).
	Capacity bool
	// SerialClaims: concurrent claims never interleave (the in-process
	// lock); PostgreSQL's claimers skip each other's locked rows, so the
	// order is exact within one claim only.
	SerialClaims bool
	// MinLeaseDuration is the backend's floor on a positive
	// LeaseDuration, 0 for none: PostgreSQL's timestamps are in
	// microseconds, so pgrouter refuses a LeaseDuration below a
	// millisecond (with the core's message form, naming the floor).
	MinLeaseDuration time.Duration
	// ForcedExpiry: the Backends implement Expirer (the core, by a test
	// hook), so the linearizability workload also forces expiries at any
	// instant, not only when the clock passes a lease's expiry.
	// PostgreSQL's leases expire by its clock only.
	ForcedExpiry bool
	// Totals: Stats' totals (Enqueued, Duplicates, LeasesGranted,
	// Heartbeats, StaleRejections, Expirations), summed over the distinct
	// handles of a job set, count every call on it and are readable after
	// Close, so the linearizability check holds them to its history.
	Totals bool
	// Audit: the Backends implement Auditor, checked once the
	// linearizability workload is over.
	Audit bool
	// SharedClients: several Clients (processes) share one job set, each
	// registering its own kinds (ClientHarness.Peer). An in-process
	// Client's job set is its own, so every kind in it is registered.
	SharedClients bool
}

// Expirer is the optional capability Caps.ForcedExpiry declares.
type Expirer interface {
	// ExpireNow makes the lease of job id expire at the backend's current
	// instant, as if its expiry had been now, and settles it: pending
	// again with the attempt counted, or dead after its last attempt. It
	// reports whether the job was leased; false (an unknown job, one not
	// leased, or after Close) changes nothing.
	ExpireNow(ctx context.Context, id string) bool
}

// Auditor is the optional capability Caps.Audit declares.
type Auditor interface {
	// Audit checks the backend's internal invariants and returns every
	// violation (nil: none). It works after Close.
	Audit(ctx context.Context) error
}

// Harness is one backend under test.
type Harness interface {
	// Name names the backend in logs.
	Name() string
	// Caps declares what differs.
	Caps() Caps
	// Scope runs f as one test of the suite: inside a synctest bubble for
	// an in-process backend, as is for a real server.
	Scope(t *testing.T, f func(t *testing.T))
	// Open returns n handles on one fresh job set with cfg's options (n
	// processes sharing a database; an in-process backend may return one
	// handle n times), closed when t ends. Handles are comparable: equal
	// ones are one.
	Open(t T, cfg Config, n int) []Backend
	// New calls the backend's constructor with cfg's options (as Open
	// does) and returns its error; a backend it opened is closed at once.
	New(t T, cfg Config) error
	// Advance returns after at least d has passed on the backend's clock.
	// It may be called from several goroutines at once.
	Advance(d time.Duration)
	// Lease is a lease duration within which a row's few calls surely run
	// (rows that wait for an expiry use it too, so it should be short).
	Lease() time.Duration
	// Workload sizes the linearizability check (zero: the defaults).
	Workload() LinConfig
	// KeptIntervals returns the intervals at which KeepAlive keeps l (a
	// Lease of this backend) alive, one per KeepAlive call still keeping
	// it, in the order of the calls.
	KeptIntervals(l Lease) []time.Duration
	// StallHeartbeats makes the next heartbeat of b (of a lease or a
	// KeepAlive or Run round) wait, in flight, until release is called;
	// stalled is closed once it waits. release may be called more than
	// once.
	StallHeartbeats(t T, b Backend) (stalled <-chan struct{}, release func())
}

// Handler is a Run handler.
type Handler func(ctx context.Context, l Lease) error

// Backend is one handle on a job set: the Router's calls with a ctx on
// each (an in-process backend ignores it), payloads of type string.
type Backend interface {
	Enqueue(ctx context.Context, id, payload string, opts ...leaserouter.EnqueueOption) error
	EnqueueMany(ctx context.Context, jobs []leaserouter.JobSpec[string]) (duplicates []int, err error)
	Acquire(ctx context.Context, workerID string) (Lease, error)
	TryAcquire(ctx context.Context, workerID string) (Lease, error)
	AcquireMany(ctx context.Context, workerID string, max int) ([]Lease, error)
	TryAcquireMany(ctx context.Context, workerID string, max int) ([]Lease, error)
	Get(ctx context.Context, id string) (leaserouter.Job[string], bool, error)
	Cancel(ctx context.Context, id string) error
	Stats(ctx context.Context) (leaserouter.Stats, error)
	Run(ctx context.Context, opts leaserouter.WorkerOptions, h Handler) error
	// KeepAlive calls the backend's KeepAlive on l (a Lease this backend
	// returned; nil: a nil lease; ZeroLease: the backend's zero lease).
	KeepAlive(ctx context.Context, l Lease, interval time.Duration) (context.Context, context.CancelFunc)
	Close(ctx context.Context) error
}

// Lease is a backend's lease: its fields and operations.
type Lease interface {
	JobID() string
	Payload() string
	Attempt() int
	Token() leaserouter.Token
	WorkerID() string
	Progress() []byte
	// Metadata is the job's metadata (WithMetadata) as the lease carries
	// it; nil if none.
	Metadata() map[string]string
	Expiry() time.Time
	Heartbeat(ctx context.Context, progress []byte) error
	Complete(ctx context.Context) error
	Fail(ctx context.Context, cause error) error
	Release(ctx context.Context) error
	// Snooze ends the lease and has the job run again after d, the
	// attempt not counted (the core's Lease.Snooze).
	Snooze(ctx context.Context, d time.Duration) error
}

// ClientHarness is a backend's Client under test: the rows of
// ClientRows run against it (RunClient). The Client's calls take a ctx
// and may return a backend's error (a driver's), as pgrouter's do; an
// in-process backend ignores ctx where its call never waits.
type ClientHarness interface {
	// Name names the backend in logs.
	Name() string
	// Caps declares what differs (SharedClients among them).
	Caps() Caps
	// Scope runs f as one test of the suite, as Harness.Scope does.
	Scope(t *testing.T, f func(t *testing.T))
	// Advance returns after at least d has passed on the backend's clock.
	Advance(d time.Duration)
	// Lease is the default lease duration of a ClientConfig.
	Lease() time.Duration
	// NewClient returns the backend's NewClient(cfg) on a fresh job set,
	// its Stop called (with a done ctx) when t ends; or NewClient's
	// error.
	NewClient(t T, cfg ClientConfig) (Client, error)
	// Peer returns another Client with cfg on c's job set, as another
	// process would open it (only with Caps.SharedClients), stopped when
	// t ends.
	Peer(t T, c Client, cfg ClientConfig) (Client, error)
}

// ClientConfig is the options a row makes a Client with: Config is every
// queue's default (zero fields as in Config: LeaseDuration
// ClientHarness.Lease, Backoff none), Queues the queues (empty: one,
// DefaultQueue), Middleware the middleware around every attempt.
type ClientConfig struct {
	Config
	Queues     map[string]QueueConfig
	Middleware []leaserouter.Middleware
}

// QueueConfig is one queue of a ClientConfig: its Workers and Timeout,
// and Config's non-zero fields override the client's.
type QueueConfig struct {
	Workers int
	Config  Config
	Timeout time.Duration
}

// Client is a backend's Client, with string payloads.
type Client interface {
	// Register registers a kind whose handler is h (nil: a nil handler);
	// each job's lease is a Lease (and a MetadataLease).
	Register(kind string, h Handler, opts ...leaserouter.KindOption) (Kind, error)
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Drained(ctx context.Context) error
	// Queue returns the queue's admin calls, nil for a queue the Client
	// does not have.
	Queue(name string) QueueAdmin
	QueueNames() []string
	QueueStats(ctx context.Context) ([]leaserouter.QueueStats, error)
}

// Kind is a registered kind of a Client.
type Kind interface {
	Name() string
	Queue() string
	Enqueue(ctx context.Context, id, payload string, opts ...leaserouter.EnqueueOption) error
	EnqueueMany(ctx context.Context, specs []leaserouter.JobSpec[string]) (duplicates []int, err error)
	// AddPeriodic and RemovePeriodic are the Kind's periodic jobs (the
	// core's take no ctx).
	AddPeriodic(ctx context.Context, p leaserouter.Periodic[string]) error
	RemovePeriodic(name string) error
}

// QueueAdmin is one queue of a Client: the admin calls the rows use, the
// payloads as strings.
type QueueAdmin interface {
	Name() string
	Get(ctx context.Context, id string) (leaserouter.Job[string], bool, error)
	List(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[string], error)
	Stats(ctx context.Context) (leaserouter.Stats, error)
	Retry(ctx context.Context, id string) error
	Cancel(ctx context.Context, id string) error
}

// MetadataLease is what a Client's lease adds to Lease: the job's
// metadata (Lease.Metadata).
type MetadataLease interface {
	Metadata() map[string]string
}
