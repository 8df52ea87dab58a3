package leaserouter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Per-attempt timeouts: the limit of a job's attempts (WithTimeout,
// WorkerOptions.Timeout), and how Run applies it to a handler's ctx.

// timeouts interns the distinct WithTimeout durations of a Router, so that
// a job record keeps a 2-byte index into them (in what was the record's
// padding: a job costs no more memory for having a timeout) rather than 8
// bytes. Index 0 is "none". It has its own lock, taken by Enqueue before
// the router's (parseJob) and under it only by Get and List (snapshot):
// never the other way round.
type timeouts struct {
	mu   sync.Mutex
	idx  map[time.Duration]uint16
	vals []time.Duration // vals[i-1] is index i's
}

// maxTimeouts is how many distinct WithTimeout durations one Router
// holds; Enqueue refuses one more with ErrInvalidJob.
const maxTimeouts = math.MaxUint16

// errTooManyTimeouts: Enqueue of a job whose WithTimeout would be the
// Router's maxTimeouts+1st distinct duration.
var errTooManyTimeouts = errors.New("more distinct WithTimeout durations than one Router holds")

// index returns d's index, interning it if new; 0 for d == 0. It returns
// an error wrapping ErrInvalidJob when maxTimeouts distinct durations are
// held already.
func (t *timeouts) index(d time.Duration, id string) (uint16, error) {
	if d == 0 {
		return 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.idx[d]; ok {
		return i, nil
	}
	if len(t.vals) == maxTimeouts {
		return 0, fmt.Errorf("%w: WithTimeout(%v) for job %q: %w (%d)", ErrInvalidJob, d, id, errTooManyTimeouts, maxTimeouts)
	}
	if t.idx == nil {
		t.idx = make(map[time.Duration]uint16)
	}
	t.vals = append(t.vals, d)
	i := uint16(len(t.vals))
	t.idx[d] = i
	return i, nil
}

// of returns the duration of index i; 0 for 0.
func (t *timeouts) of(i uint16) time.Duration {
	if i == 0 {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.vals[i-1]
}

// limit is the timeout of an attempt of j under a Run whose
// WorkerOptions.Timeout is def: the job's WithTimeout if it has one. j's
// index is set before the job is first published and never changes, so
// the worker granted its lease may read it without r.mu.
func (r *Router[T]) limit(j *job[T], def time.Duration) time.Duration {
	if j.tmo != 0 {
		return r.tmo.of(j.tmo)
	}
	return def
}

// withTimeout returns the handler's ctx for l under the limit d (none for
// d == 0): canceled d from now with a *TimeoutError as its cause, so that
// ctx.Err() is context.DeadlineExceeded and context.Cause says which job
// and limit. Derived from a context of the standard library's (parent is
// the made leaseCtx's), it costs a timer and no goroutine.
func withTimeout[T any](parent context.Context, l *Lease[T], d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(parent, d, &TimeoutError{JobID: l.JobID, Token: l.Token, Timeout: d})
}
