package leaserouter

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/order"
)

// State is where a job is in its life. The zero value is StatePending.
type State uint8

// The states of a job. A job moves pending -> leased -> (succeeded | pending |
// scheduled | dead), scheduled -> pending when its run-at comes, and any
// unfinished state -> canceled. Succeeded, dead and canceled are terminal:
// a job in one of them never changes again.
const (
	StatePending   State = iota // ready to be leased
	StateScheduled              // waiting for its run-at time (delay or retry backoff)
	StateLeased                 // held by one worker under a lease
	StateSucceeded              // terminal: completed by the holder of a valid lease
	StateDead                   // terminal: no attempts left, or after a Permanent error (EventDead); one failed attempt is EventFailed, after which a job with attempts left is scheduled or pending again
	StateCanceled               // terminal: canceled by Router.Cancel
	numStates
	stateNew = numStates // a job being enqueued, before its first state
)

// StateFailed is the dead state under its former name.
//
// Deprecated: use StateDead. "Failed" names one failed attempt
// (EventFailed); a job with no attempts left is dead.
const StateFailed = StateDead

var stateNames = [numStates]string{"pending", "scheduled", "leased", "succeeded", "dead", "canceled"}

// String returns the state's lower-case name ("pending", "leased", "dead",
// ...), or "State(n)" for a value outside the constants. ParseState reads
// it back.
func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// ParseState returns the State named name, as State.String writes it
// ("pending", "scheduled", "leased", "succeeded", "dead", "canceled"). It
// also accepts "failed", the dead state's former name, for one release
// (deprecated: write "dead"). Names are exact (lower case, no spaces);
// any other name, "" included, returns an error wrapping
// ErrInvalidOptions (a bad state filter) that names it.
func ParseState(name string) (State, error) {
	if name == "failed" {
		return StateDead, nil
	}
	for s, n := range stateNames {
		if n == name {
			return State(s), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown state %q (one of pending, scheduled, leased, succeeded, dead, canceled)", ErrInvalidOptions, name)
}

// Terminal reports whether s is succeeded, dead or canceled: a job in a
// terminal state never changes again.
func (s State) Terminal() bool { return s >= StateSucceeded && s < numStates }

// Job is a snapshot of one job, as returned by Router.Get. It is a copy:
// changing it changes nothing in the router. Times carry Go's monotonic clock
// reading when they come from the router's clock.
type Job[T any] struct {
	ID          string
	Payload     T // shared with the caller when T is a reference type
	State       State
	Priority    int
	Attempt     int   // leases granted so far (not counting those Run handed back unstarted); the first lease is attempt 1
	MaxAttempts int   // attempts the job may have before it is dead
	Token       Token // fencing token of the latest lease; 0 if never leased
	Owner       string
	LeaseExpiry time.Time // zero unless StateLeased
	// LeasedAt is when the current lease was granted; zero unless
	// StateLeased. While leased, UpdatedAt is the instant of the lease's
	// last accepted heartbeat, or LeasedAt when it has had none.
	LeasedAt  time.Time
	RunAt     time.Time // when a scheduled job becomes ready; zero otherwise
	Progress  []byte    // last checkpoint reported by Lease.Heartbeat (a copy)
	LastError string    // most recent failure (error, panic, expiry), at most MaxErrorBytes; kept after a later success
	// Errors records the job's failed attempts, oldest first: the most
	// recent MaxAttemptErrors of them (AttemptError says what counts),
	// kept after a later success and through Retry (the new attempts'
	// records follow, their numbers starting again at 1); a job enqueued
	// again under the ID of a purged one starts with none, as its
	// LastError starts empty. LastError is the last record's Error,
	// except "attempts exhausted", which has no record (AttemptError).
	// nil when none, and in the jobs of List with OmitPayload, Leases
	// and LeasePage (as Progress): Get returns them. A copy.
	Errors    []AttemptError
	Timeout   time.Duration     // each attempt's limit set by WithTimeout; 0 if none (WorkerOptions.Timeout applies)
	Kind      string            // the job's kind, as a Client registered it; "" for a Router's jobs
	Metadata  map[string]string // WithMetadata's pairs (a copy); nil if none
	CreatedAt time.Time
	UpdatedAt time.Time
}

// EnqueueOption changes how one job is enqueued. Options are made by the
// With functions (WithDelay, WithRunAt, WithPriority, ...) and applied in
// order, so of WithDelay and WithRunAt the last one wins. An EnqueueOption
// is a small comparable struct with unexported fields, not a closure, so
// passing options allocates nothing; its zero value, EnqueueOption{}, is
// no option and changes nothing. Every backend reads the same options.
type EnqueueOption contract.EnqueueOption

// WithPriority sets the job's priority: a higher priority is leased first.
// Default 0; negative priorities are allowed and run after the default.
func WithPriority(p int) EnqueueOption { return EnqueueOption(contract.WithPriority(p)) }

// WithDelay makes the job scheduled until now+d. Zero means ready at once; a
// negative d makes Enqueue return ErrInvalidJob. It replaces an earlier
// WithRunAt.
func WithDelay(d time.Duration) EnqueueOption { return EnqueueOption(contract.WithDelay(d)) }

// WithRunAt makes the job scheduled until t. A t not after the enqueue time
// (including the zero Time) means ready at once, with the enqueue time as its
// ready time. It replaces an earlier WithDelay.
func WithRunAt(t time.Time) EnqueueOption { return EnqueueOption(contract.WithRunAt(t)) }

// WithMaxAttempts overrides Options.MaxAttempts for this job: the number of
// leases it may be granted. n < 1 or n > math.MaxInt32 makes Enqueue
// return ErrInvalidJob.
func WithMaxAttempts(n int) EnqueueOption { return EnqueueOption(contract.WithMaxAttempts(n)) }

// WithTimeout limits each attempt of the job to d: Run cancels the
// handler's ctx d after the handler starts, with a cause wrapping
// context.DeadlineExceeded (a *TimeoutError), and the handler's error then
// fails the attempt as any error does (retried after Backoff). The lease
// is heartbeated until the handler returns: a timeout is not a lost lease.
// It overrides WorkerOptions.Timeout; 0 (the default) leaves that in
// force; a negative d makes Enqueue return ErrInvalidJob. Any number of
// jobs may have distinct durations (one computed from a request's
// deadline, say): each job keeps its own. Job.Timeout reports it for as
// long as the router knows the job, finished or not, and Retry keeps it.
// Acquire's callers read it from Job.Timeout and apply it themselves.
func WithTimeout(d time.Duration) EnqueueOption { return EnqueueOption(contract.WithTimeout(d)) }

// job is the router's record of one job. Every field is guarded by the
// router's mu. Times are nanoseconds since the router's epoch (a monotonic
// reading taken at New), so they compare as plain integers and a wall-clock
// step cannot move them.
type job[T any] struct {
	id         string
	payload    T
	progress   []byte
	fails      *failures            // LastError and Errors; nil until the job has either (most jobs never fail: 8 bytes, not 40)
	meta       map[string]string    // WithMetadata's, merged; nil if none. Never written once stored: readers share it
	lease      *Lease[T]            // the current lease; nil unless leased
	orderChunk *order.Chunk[job[T]] // its place in enqueue order (List)

	hash        uint64 // of id, as the job index stores it
	token       Token
	seq         uint64 // enqueue order, the last tie-breaker
	priority    int
	created     int64
	updated     int64
	at          int64         // leased: lease expiry; scheduled: run-at; pending: ready time; finished: purge time
	timeout     time.Duration // its WithTimeout; 0 if none. Set before the record is published and never changed (Run reads it without the lock: timeout.go)
	attempt     int32
	maxAttempts int32
	heapIndex   int32 // position in the index of its state (ready queue, scheduled or lease heap, retention queue); -1 if none
	state       State
	ended       endReason // why the latest lease ended
	kind        uint16    // index of its kind in the router's kinds; 0: "", a Router's jobs. Set before the record is published and never changed
}

// endReason says why a job's latest lease ended; it becomes
// LeaseLostError.Reason when the holder of that lease acts later.
type endReason uint8

const (
	endNone endReason = iota
	endExpired
	endReleased
	endFailed
	endCompleted
	endCanceled
	endRevoked
	endSnoozed
)

var endReasonNames = [...]LostReason{"unknown", LostExpired, LostReleased, LostFailed, LostCompleted, LostCanceled, LostRevoked, LostSnoozed}

// reason is the reason as LeaseLostError.Reason gives it.
func (e endReason) reason() LostReason { return endReasonNames[e] }

// endedByHolder is contract.EndedByHolder of each endReason's reason,
// read once per lease that ends (endLease) instead of comparing strings.
var endedByHolder = func() (by [len(endReasonNames)]bool) {
	for e, name := range endReasonNames {
		by[e] = contract.EndedByHolder(string(name))
	}
	return by
}()

// readyBefore orders the ready heap: higher priority first, then earlier
// ready time, then enqueue order.
func readyBefore[T any](a, b *job[T]) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// dueBefore orders the scheduled and lease heaps by deadline, then enqueue
// order so equal deadlines settle deterministically.
func dueBefore[T any](a, b *job[T]) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// purgeBefore orders the retention queue by purge time alone: jobs that
// finish at the same instant are purged in the order they finished, as
// the ring keeps them.
func purgeBefore[T any](a, b *job[T]) bool { return a.at < b.at }

func setHeapIndex[T any](j *job[T], i int) { j.heapIndex = int32(i) }

func jobID[T any](j *job[T]) string { return j.id }

// owner is the worker holding j's lease, "" unless j is leased.
func (j *job[T]) owner() string {
	if j.lease == nil {
		return ""
	}
	return j.lease.WorkerID
}

// jobRow is what the admin reads copy of a job under the router's lock:
// the Job without its payload, so its size does not depend on T (a zero
// T of a large value type costs its size to write), with Progress the
// record's checkpoint itself when asked for (see row).
type jobRow = Job[struct{}]

// row is x as Get returns it, without its payload, and with Progress
// x's checkpoint itself and Errors x's records themselves if progress is
// set, else nil. The caller copies both (slices.Clone) once it has
// released r.mu, so no hold of the lock grows with checkpoint sizes or
// histories: a stored checkpoint is never written again (Heartbeat
// stores a fresh copy; forget and Retry only drop or share the
// reference), nor a record within a length handed out (appendError), so
// reading them outside the lock is safe. The caller holds r.mu.
func (r *Router[T]) row(x *job[T], progress bool) jobRow {
	j := jobRow{
		ID: x.id, State: x.state, Priority: x.priority,
		Attempt: int(x.attempt), MaxAttempts: int(x.maxAttempts), Token: x.token,
		Owner: x.owner(), LastError: x.fails.lastError(),
		CreatedAt: r.timeAt(x.created), UpdatedAt: r.timeAt(x.updated), Timeout: x.timeout,
		Kind: r.kindName(x.kind), Metadata: x.meta,
	}
	if progress {
		j.Progress = x.progress
		j.Errors = x.fails.history()
	}
	switch x.state {
	case StateLeased:
		j.LeaseExpiry = r.timeAt(x.at)
		j.LeasedAt = r.timeAt(x.lease.granted)
	case StateScheduled:
		j.RunAt = r.timeAt(x.at)
	}
	return j
}

// withPayload is the Job of row w and payload p, its Progress, Errors
// and Metadata copies of w's (shared with the record: see row). Called
// without r.mu.
func withPayload[T any](w *jobRow, p T) Job[T] {
	return Job[T]{
		ID: w.ID, Payload: p, State: w.State, Priority: w.Priority,
		Attempt: w.Attempt, MaxAttempts: w.MaxAttempts, Token: w.Token, Owner: w.Owner,
		LeaseExpiry: w.LeaseExpiry, LeasedAt: w.LeasedAt, RunAt: w.RunAt, Progress: slices.Clone(w.Progress),
		LastError: w.LastError, Errors: slices.Clone(w.Errors), Timeout: w.Timeout, Kind: w.Kind, Metadata: maps.Clone(w.Metadata),
		CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
	}
}

// addSat adds without overflowing: a huge delay saturates to "never".
func addSat(t int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-t {
		return math.MaxInt64
	}
	return t + int64(d)
}

// enqueueSpec is one job's Enqueue options, checked, its ID's hash and
// its kind: what Enqueue and EnqueueMany work out before taking the lock.
type enqueueSpec struct {
	contract.EnqueueSettings
	hash uint64
	kind uint16 // index in the router's kinds; 0 for a Router's Enqueue
}

// parseJob checks id and opts and fills s with what insert needs, or
// returns an error wrapping ErrInvalidJob. It reads nothing guarded by
// r.mu. (s is filled in place: returning it costs Enqueue a copy.)
func (r *Router[T]) parseJob(s *enqueueSpec, id string, opts []EnqueueOption) error {
	s.MaxAttempts = r.opts.MaxAttempts
	if len(opts) == 0 {
		// The common Enqueue: with no option there is nothing to read and
		// no queue to check, only the ID (what ReadEnqueueOptions would
		// do, without its loop and CheckQueue's call).
		if err := contract.ValidateID(ErrInvalidJob, id); err != nil {
			return err
		}
	} else {
		if err := contract.ReadEnqueueOptions(ErrInvalidJob, &s.EnqueueSettings, id, opts); err != nil {
			return err
		}
		if err := contract.CheckQueue(ErrInvalidJob, &s.EnqueueSettings, id, r.queue); err != nil {
			return err
		}
	}
	s.hash = r.jobs.Hash(id) // the seed never changes: no lock needed
	return nil
}

// JobSpec is one job of an EnqueueMany batch: Enqueue's arguments.
type JobSpec[T any] struct {
	ID      string
	Payload T
	Options []EnqueueOption
}

// MaxIDBytes is the longest ID, in bytes, a router accepts. The rule for
// IDs is the same on every backend, so a program moving between them
// meets the same errors: a job ID is valid UTF-8 (no stray byte,
// truncated sequence or UTF-16 surrogate), holds no NUL byte, is not
// empty and is at most MaxIDBytes bytes long — bytes, not characters:
// 256 four-byte runes fill it. Worker IDs follow the same rule, except
// that they may be empty. See ValidateID.
//
// 1024 bytes is far above any natural key (a UUID is 36 bytes, a SHA-256
// in hex 64) and well inside what a database-backed router can store and
// index: PostgreSQL's text holds neither NUL nor invalid UTF-8, and a
// btree entry must fit in a third of a page (2704 bytes with 8 kB pages);
// pgrouter indexes (queue, id), with queue names of at most
// pgrouter.MaxQueueBytes (256), so the largest entry is under 1.3 kB even
// when its bytes do not compress.
const MaxIDBytes = 1024

// ValidateID returns nil if id is a valid job ID (see MaxIDBytes), or an
// error wrapping ErrInvalidJob that names the first problem: "empty ID",
// the length for an id longer than MaxIDBytes, the byte offset of a NUL
// or of the first byte that is not valid UTF-8; the message quotes at
// most the first 32 bytes of id. Enqueue, EnqueueMany (naming the batch
// index) and Cancel apply it, and Get finds no job for an id it refuses,
// on every backend; call it to check IDs before they reach a router. It
// is cheap (one pass over at most MaxIDBytes bytes) and safe for
// concurrent use.
func ValidateID(id string) error { return contract.ValidateID(ErrInvalidJob, id) }
