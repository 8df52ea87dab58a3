package contract

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Enqueue options and the rule for IDs, on every backend: what a job's
// options ask for and how they are checked (ReadEnqueueOptions), and what
// a job ID, a worker ID, a queue name or a fence key may be (ValidateID,
// ValidateWorkerID, NameProblem), with one set of messages.

// MaxIDBytes is the longest job or worker ID, in bytes
// (leaserouter.MaxIDBytes).
const MaxIDBytes = 1024

// option is an EnqueueOption's representation: a small value, not a
// closure, so passing options allocates nothing. It is an alias of the
// struct type, so that ReadEnqueueOptions can take leaserouter's
// EnqueueOption (a type defined on EnqueueOption) without a copy.
type option = struct {
	kind  optionKind
	n     int
	d     time.Duration
	runAt time.Time
	str   string             // WithQueue's queue
	meta  *map[string]string // WithMetadata's copy of the caller's map (a pointer keeps the option comparable)
}

// EnqueueOption is one option of Enqueue, as WithPriority and the other
// constructors below make it. leaserouter.EnqueueOption is a type defined
// on it, so the core's options are read here, by both backends.
type EnqueueOption option

// AnyEnqueueOption is the constraint of ReadEnqueueOptions: EnqueueOption and the
// types defined on it (leaserouter.EnqueueOption).
type AnyEnqueueOption interface{ ~option }

type optionKind uint8

const (
	optNone optionKind = iota
	optPriority
	optDelay
	optRunAt
	optMaxAttempts
	optTimeout
	optQueue
	optMetadata
)

// WithPriority is leaserouter.WithPriority's option.
func WithPriority(p int) EnqueueOption { return EnqueueOption{kind: optPriority, n: p} }

// WithDelay is leaserouter.WithDelay's option.
func WithDelay(d time.Duration) EnqueueOption { return EnqueueOption{kind: optDelay, d: d} }

// WithRunAt is leaserouter.WithRunAt's option.
func WithRunAt(t time.Time) EnqueueOption { return EnqueueOption{kind: optRunAt, runAt: t} }

// WithMaxAttempts is leaserouter.WithMaxAttempts's option.
func WithMaxAttempts(n int) EnqueueOption { return EnqueueOption{kind: optMaxAttempts, n: n} }

// WithTimeout is leaserouter.WithTimeout's option.
func WithTimeout(d time.Duration) EnqueueOption { return EnqueueOption{kind: optTimeout, d: d} }

// WithQueue is leaserouter.WithQueue's option.
func WithQueue(queue string) EnqueueOption { return EnqueueOption{kind: optQueue, str: queue} }

// WithMetadata is leaserouter.WithMetadata's option: md is copied here,
// so the caller may change its map afterwards. A nil or empty md adds
// nothing.
func WithMetadata(md map[string]string) EnqueueOption {
	c := make(map[string]string, len(md))
	for k, v := range md {
		c[k] = v
	}
	return EnqueueOption{kind: optMetadata, meta: &c}
}

// EnqueueSettings is what a job's options ask for, as ReadEnqueueOptions
// reads them. At most one of Delay and RunAt is set: the later of
// WithDelay and WithRunAt in the list (a job is ready at its enqueue time
// + Delay, or at RunAt if that is later than its enqueue time).
type EnqueueSettings struct {
	Priority    int           // WithPriority; default 0
	MaxAttempts int           // WithMaxAttempts; as the caller set it when not given (the router's default)
	Delay       time.Duration // WithDelay; 0 when not given
	RunAt       time.Time     // WithRunAt; zero when not given
	Timeout     time.Duration // WithTimeout: each attempt's limit; 0 when not given (WorkerOptions.Timeout applies)
	Queue       string        // WithQueue (the last one); "" when not given: the caller's queue
	// Metadata is the WithMetadata maps merged in order (a later key
	// wins), checked against the limits; nil when none is given or all
	// are empty. Read-only: it may be shared with the option's own copy,
	// and so with other jobs enqueued with the same option value.
	Metadata map[string]string
	timed    bool // WithDelay or WithRunAt given (CheckPeriodic refuses both)
}

// ReadEnqueueOptions checks id (ValidateID) and applies opts to s, in
// order, as Enqueue does on every backend: nil, or an error wrapping
// errInvalidJob naming the first problem (an id ValidateID refuses,
// WithDelay < 0, WithTimeout < 0, WithMaxAttempts out of [1,
// math.MaxInt32]), with s then partly filled. Fields no option sets keep
// their values: the caller sets the router's MaxAttempts first (or
// reads 0 as "not given"). Nil or empty opts change nothing.
func ReadEnqueueOptions[O AnyEnqueueOption](errInvalidJob error, s *EnqueueSettings, id string, opts []O) error {
	if err := ValidateID(errInvalidJob, id); err != nil {
		return err
	}
	for _, o := range opts {
		switch o := option(o); o.kind {
		case optPriority:
			s.Priority = o.n
		case optMaxAttempts:
			if o.n < 1 || o.n > math.MaxInt32 {
				return fmt.Errorf("%w: WithMaxAttempts(%d) for job %q, must be in [1, %d]", errInvalidJob, o.n, id, math.MaxInt32)
			}
			s.MaxAttempts = o.n
		case optDelay:
			if o.d < 0 {
				return fmt.Errorf("%w: WithDelay(%v) for job %q, must be >= 0", errInvalidJob, o.d, id)
			}
			s.Delay, s.RunAt, s.timed = o.d, time.Time{}, true
		case optRunAt:
			s.Delay, s.RunAt, s.timed = 0, o.runAt, true
		case optTimeout:
			if o.d < 0 {
				return fmt.Errorf("%w: WithTimeout(%v) for job %q, must be >= 0 (0 = WorkerOptions.Timeout)", errInvalidJob, o.d, id)
			}
			s.Timeout = o.d
		case optQueue:
			s.Queue = o.str
		case optMetadata:
			if o.meta != nil && len(*o.meta) > 0 {
				s.Metadata = mergeMetadata(s.Metadata, *o.meta)
			}
		}
	}
	if s.Metadata != nil {
		if p := MetadataProblem(s.Metadata); p != "" {
			return fmt.Errorf("%w: WithMetadata for job %q: %s", errInvalidJob, id, p)
		}
	}
	return nil
}

// CheckQueue is the check of a Router's Enqueue on every backend: nil
// when s names no queue (WithQueue not given) or names own, the Router's
// queue; else an error wrapping errInvalidJob. A Router serves one queue;
// a Client routes a job to another of its queues.
func CheckQueue(errInvalidJob error, s *EnqueueSettings, id, own string) error {
	if s.Queue == "" || s.Queue == own {
		return nil
	}
	return fmt.Errorf("%w: WithQueue(%s) for job %q: this Router serves queue %s only", errInvalidJob, Quote(s.Queue), id, Quote(own))
}

// AtBatchIndex is err, the error of job i of an EnqueueMany batch, naming
// its index as "(batch index i)".
func AtBatchIndex(err error, i int) error { return fmt.Errorf("%w (batch index %d)", err, i) }

// ValidateID is leaserouter.ValidateID, its error wrapping errInvalidJob:
// nil for a valid job ID (not empty, and the rule of NameProblem with
// MaxIDBytes), else an error naming the first problem. The common ID
// (plain ASCII) is checked a word (8 bytes) at a time.
func ValidateID(errInvalidJob error, id string) error {
	if id != "" && PlainID(id) {
		return nil
	}
	return invalidID(errInvalidJob, id)
}

// invalidID is ValidateID for an id PlainID did not pass.
func invalidID(errInvalidJob error, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty ID", errInvalidJob)
	}
	if p := NameProblem(id, MaxIDBytes, "MaxIDBytes"); p != "" {
		return fmt.Errorf("%w: ID %s", errInvalidJob, p)
	}
	return nil
}

// CheckJobID is the first step of an operation on job id (Cancel, Retry,
// Delete) on every backend: nil for a valid id, else ValidateID's error
// wrapped with errNotFound too (such an id names no job), so the error is
// both errInvalidJob and errNotFound.
func CheckJobID(errInvalidJob, errNotFound error, id string) error {
	if err := ValidateID(errInvalidJob, id); err != nil {
		return fmt.Errorf("%w: %w", err, errNotFound)
	}
	return nil
}

// ValidateWorkerID returns nil if id is a valid worker ID — the rule for
// job IDs, except that "" is allowed — or an error wrapping errInvalid
// (the core's ErrInvalidOptions) that names the problem as ValidateID
// does. Acquire, TryAcquire, AcquireMany and TryAcquireMany apply it to
// their workerID before anything else, on every backend.
func ValidateWorkerID(errInvalid error, id string) error {
	if PlainID(id) {
		return nil
	}
	if p := NameProblem(id, MaxIDBytes, "MaxIDBytes"); p != "" {
		return fmt.Errorf("%w: worker ID %s", errInvalid, p)
	}
	return nil
}

// PlainID reports whether s is at most MaxIDBytes of ASCII without NUL:
// the common ID, which passes the rule without the UTF-8 decoder
// (Enqueue and TryAcquire pay this on every call). False says nothing:
// NameProblem tells.
func PlainID(s string) bool {
	n := len(s)
	switch {
	case n > MaxIDBytes:
		return false
	case n >= 8:
		// Eight bytes a step, the last step overlapping the one before
		// it, so no byte is left for a loop of its own.
		for i := 0; i < n-8; i += 8 {
			if !plain8(s[i : i+8]) {
				return false
			}
		}
		return plain8(s[n-8:])
	case n >= 4:
		return plain4(s[:4]) && plain4(s[n-4:])
	}
	for i := 0; i < n; i++ {
		// NUL wraps around to 0xff; 0x80 and above stay at 0x7f or above.
		if s[i]-1 >= utf8.RuneSelf-1 {
			return false
		}
	}
	return true
}

// plain8 reports whether the first 8 bytes of s are ASCII without NUL.
// Per byte b (little-endian word w): b-1 sets the byte's top bit for a
// NUL, b itself for 0x80 and above, and for any other byte neither sets
// it nor borrows from the next byte (a borrow starts only at a NUL,
// which already fails the word).
func plain8(s string) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	_ = s[7] // one bounds check; the compiler makes the eight loads one
	w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	return ((w-ones)|w)&tops == 0
}

// plain4 is plain8 for the first 4 bytes of s.
func plain4(s string) bool {
	const ones, tops = 0x01010101, 0x80808080
	_ = s[3]
	w := uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
	return ((w-ones)|w)&tops == 0
}

// NameProblem says what breaks the rule for IDs and names in s — valid
// UTF-8, no NUL byte, at most limit bytes (limitName names the limit in
// the message) — quoting at most s's first 32 bytes, or "" if nothing
// does ("" itself passes: whether a name may be empty is the caller's
// rule). The length is checked first, so a huge s costs nothing more.
// The core applies it to job and worker IDs (leaserouter.ValidateID,
// limit MaxIDBytes), pgrouter to queue names and fence keys.
func NameProblem(s string, limit int, limitName string) string {
	if len(s) > limit {
		return fmt.Sprintf("%s is %d bytes, above %s (%d)", Quote(s), len(s), limitName, limit)
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Sprintf("%s holds NUL at byte %d", Quote(s), i)
	}
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%s is not valid UTF-8 at byte %d", Quote(s), invalidUTF8At(s))
	}
	return ""
}

// invalidUTF8At is the offset of the first byte of s that does not start
// a valid UTF-8 sequence; len(s) if there is none.
func invalidUTF8At(s string) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(s)
}

// Quote quotes s for an error message, cut to at most its first 32 bytes
// (at a rune's start, when s is valid UTF-8 there).
func Quote(s string) string {
	if len(s) <= 32 {
		return fmt.Sprintf("%q", s)
	}
	k := 32
	for k > 28 && !utf8.RuneStart(s[k]) {
		k--
	}
	return fmt.Sprintf("%q...", s[:k])
}
