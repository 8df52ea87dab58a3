package pgrouter

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Options configure a Router. The zero value is valid: every zero field
// gets its default; the fields leaserouter.Options has too are checked
// and defaulted as there.
type Options struct {
	// Queue names this Router's jobs: routers of other queues share the
	// tables, never the jobs. Default "default". A name follows the
	// core's rule for IDs with a limit of its own: valid UTF-8, no NUL,
	// at most MaxQueueBytes bytes; New returns an error wrapping
	// leaserouter.ErrInvalidOptions for any other.
	Queue string
	// Schema is the PostgreSQL schema holding pgrouter's tables, types
	// and functions, made there by MigrateTo with the same Schema. Default
	// "": every name is sent unqualified and resolved by the connection's
	// search_path (usually "public"), as before this option existed.
	// Otherwise every statement names every object as "Schema".name,
	// the name quoted as written (case kept), so the pool's search_path
	// does not matter; Routers of different schemas in one database share
	// nothing: neither jobs, nor tokens, nor fences (use FenceIn), nor
	// wake-ups (each schema has its own LISTEN/NOTIFY channel). New
	// returns an error wrapping leaserouter.ErrInvalidOptions for a name
	// that is blank, has spaces around it, is longer than MaxSchemaBytes,
	// holds a control character, a quote or a dollar sign, or starts with "pg_"; and one
	// wrapping ErrSchemaOutdated, naming the schema, when the schema does
	// not exist or is not migrated to this module's version. Give every
	// process of a database the same Schema: "public" and "" name the
	// same tables when the search_path finds public, but their wake-ups
	// and Migrate's locks are apart (a Router of one is woken by its poll
	// only when the other enqueues, and their Migrates do not wait for
	// each other).
	Schema string
	// Kind is the kind of this Router's jobs (leaserouter.Job.Kind):
	// every job it enqueues has it, and it leases only jobs of this kind,
	// so a Router shares its queue with processes serving other kinds (a
	// Client's, say) and never takes, nor burns an attempt of, a job it
	// cannot decode. Default "", the kind of every job written by a
	// Router that sets none (and by versions before kinds). A kind
	// follows the core's rule for IDs (valid UTF-8, no NUL, at most
	// leaserouter.MaxIDBytes bytes); New returns an error wrapping
	// leaserouter.ErrInvalidOptions for any other.
	Kind string
	// LeaseDuration is how long a lease lasts without a heartbeat, on the
	// database's clock. Default leaserouter.DefaultLeaseDuration (30s);
	// negative is invalid; a positive one below MinLeaseDuration (1ms) is
	// invalid (the database keeps microseconds, and a lease must outlast a
	// round trip), unlike the core's.
	LeaseDuration time.Duration
	// MaxAttempts is how many leases a job may be granted before it is
	// dead. Default leaserouter.DefaultMaxAttempts (5); negative or above
	// math.MaxInt32 is invalid. WithMaxAttempts overrides it per job.
	MaxAttempts int
	// Backoff gives the delay before retrying a job after Lease.Fail on
	// the given attempt (1 for the first). Default
	// leaserouter.DefaultBackoff. A result <= 0 retries at once. It is not
	// called for a Permanent cause. A panic in it is recovered, counted in
	// Stats.CallbackPanics and reported (see OnEvent), and the attempt uses
	// DefaultBackoff instead.
	Backoff func(attempt int) time.Duration
	// Retention is how long finished jobs stay for Get and dedup. Zero
	// means leaserouter.DefaultRetention (10m); negative means finished
	// jobs are dropped at once (invisible at once; the rows of jobs that
	// Run completes are deleted by the completion itself, the others by
	// the next maintenance round, see New).
	Retention time.Duration
	// TokenFloor: every token issued is greater than it. The token
	// sequence is shared by every Router of the database; New raises it
	// above TokenFloor and the Unix time in nanoseconds (database clock),
	// never lowers it. It must be below math.MaxInt64.
	TokenFloor leaserouter.Token
	// PollInterval bounds how long a blocked Acquire waits when a
	// notification is missed (or the listening connection is down).
	// Default 1s; negative is invalid.
	PollInterval time.Duration
	// NoVacuum: the Router never vacuums or analyzes the jobs table itself
	// (see New), leaving it to autovacuum or to the operator's own
	// schedule. Default false: it does, when the table is due.
	NoVacuum bool
	// OnEvent, if set, receives every event of this process's transitions
	// (those its calls, its Run and its maintenance loop made; other
	// processes report their own), in the order this process recorded
	// them, from a goroutine of the Router's own, never on the goroutine
	// that made the transition; calls are serial. Event.Time is the
	// database's instant of the transition (for lease_expired, the expiry;
	// for duplicate and stale_rejected, this process's clock). Up to 16384
	// events wait for delivery; an Enqueue, EnqueueMany or claim (Acquire,
	// TryAcquire, Run taking jobs) that finds 16384 waiting waits before
	// its round trip until delivery has brought the backlog down to half
	// (the events of the batch in delivery count until their hooks
	// return); one that finds fewer goes on, even while an earlier one
	// still waits. So a hook slower than the event rate slows the
	// producers of new work; lease operations never wait. A panic in OnEvent (or a
	// runtime.Goexit, as t.FailNow does) is recovered, counted in
	// Stats.CallbackPanics and reported at level Error through Logger
	// (slog.Default() if Logger is nil); delivery goes on
	// with the next event. Close returns once every event has been
	// delivered (or its ctx is done).
	OnEvent func(leaserouter.Event)
	// Logger, if set, gets one record per event, as the core writes them
	// (leaserouter.Event.Log), after OnEvent's call for the same event. A
	// panic in its handler is recovered, counted in Stats.CallbackPanics
	// and reported to slog.Default().
	Logger *slog.Logger

	// kinds are the kinds the Router's claim serves, in the order of the
	// claim's arms (Lease.arm indexes it); nil means Kind alone. A
	// Client's queue sets every kind it registered (withDefaults checks
	// each as Kind).
	kinds []string
}

// MinLeaseDuration is the shortest positive Options.LeaseDuration: the
// database keeps instants in microseconds, and a lease must outlast a
// round trip. The core has no such floor (see the package doc, Rules that
// differ).
const MinLeaseDuration = time.Millisecond

// DefaultPollInterval is the default Options.PollInterval.
const DefaultPollInterval = time.Second

// MaxQueueBytes is the longest Options.Queue, in bytes (not characters).
// A queue name is the payload of the NOTIFY that wakes other processes'
// Acquires (PostgreSQL refuses payloads of 8000 bytes or more) and leads
// every index entry of the jobs table, where together with an ID of up
// to leaserouter.MaxIDBytes it must fit in a btree entry (2704 bytes with
// 8 kB pages, compressed or not): 256 bytes keeps both with a wide
// margin and is far above any natural name.
const MaxQueueBytes = 256

// DefaultQueue is the default Options.Queue.
const DefaultQueue = "default"

// withDefaults checks o and fills its zero fields.
func (o Options) withDefaults() (Options, error) {
	// The fields every backend has: one check, one set of messages and
	// defaults, with this backend's floor on LeaseDuration
	// (MinLeaseDuration).
	c, err := contract.RouterDefaults(leaserouter.ErrInvalidOptions, contract.RouterOptions{LeaseDuration: o.LeaseDuration,
		MaxAttempts: o.MaxAttempts, Backoff: o.Backoff, Retention: o.Retention, TokenFloor: uint64(o.TokenFloor)}, MinLeaseDuration)
	if err != nil {
		return o, err
	}
	if o.PollInterval < 0 {
		return o, fmt.Errorf("%w: PollInterval is %v, must be >= 0 (or 0 for the default %v)", leaserouter.ErrInvalidOptions, o.PollInterval, DefaultPollInterval)
	}
	if err := checkSchema("Schema", o.Schema); err != nil {
		return o, err
	}
	if p := contract.NameProblem(o.Queue, MaxQueueBytes, "MaxQueueBytes"); p != "" {
		return o, fmt.Errorf("%w: Queue %s", leaserouter.ErrInvalidOptions, p)
	}
	if err := checkKinds(o.Kind, o.kinds); err != nil {
		return o, err
	}
	if o.kinds == nil {
		o.kinds = []string{o.Kind}
	} else {
		o.kinds = slices.Clone(o.kinds)
	}
	o.LeaseDuration, o.MaxAttempts, o.Backoff, o.Retention = c.LeaseDuration, c.MaxAttempts, c.Backoff, c.Retention
	o.Queue = cmp.Or(o.Queue, DefaultQueue)
	o.PollInterval = cmp.Or(o.PollInterval, DefaultPollInterval)
	return o, nil
}

// checkKinds checks Options.Kind and the kinds a claim serves: each
// follows the rule for IDs ("" allowed: a Router's kind), none repeats,
// and there are at most maxClaimKinds.
func checkKinds(kind string, kinds []string) error {
	if p := contract.NameProblem(kind, leaserouter.MaxIDBytes, "MaxIDBytes"); p != "" {
		return fmt.Errorf("%w: Kind %s", leaserouter.ErrInvalidOptions, p)
	}
	if kinds == nil {
		return nil
	}
	if len(kinds) == 0 || len(kinds) > maxClaimKinds {
		return fmt.Errorf("%w: %d kinds served by one queue, must be 1 to %d", leaserouter.ErrInvalidOptions, len(kinds), maxClaimKinds)
	}
	for i, k := range kinds {
		if p := contract.NameProblem(k, leaserouter.MaxIDBytes, "MaxIDBytes"); p != "" {
			return fmt.Errorf("%w: kind %s", leaserouter.ErrInvalidOptions, p)
		}
		if slices.Contains(kinds[:i], k) {
			return fmt.Errorf("%w: kind %s served twice", leaserouter.ErrInvalidOptions, contract.Quote(k))
		}
	}
	return nil
}

// maxClaimKinds is the most kinds one queue's claim serves in a process:
// the claim statement has an index walk per kind, and is planned once
// per connection; a Client registering more kinds on one queue is
// refused.
const maxClaimKinds = 256
