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

// timeouts interns the WithTimeout durations of a Router's jobs, so that a
// job record keeps a 2-byte index into them (in what was the record's
// padding: a job costs no more memory for having a timeout) rather than 8
// bytes. Index 0 is "none". Each index counts the jobs holding it and is
// reused once none does, so at most maxTimeouts distinct durations are
// held by the jobs of a Router at one time, however many it has seen.
// It has its own lock, taken by Enqueue before the router's (parseJob),
// and under the router's by whatever drops a job or refuses one parsed
// already (release) and by Get and List (snapshot): never the other way
// round.
type timeouts struct {
	mu   sync.Mutex
	idx  map[time.Duration]uint16
	vals []time.Duration // vals[i-1] is index i's duration
	refs []uint32        // refs[i-1]: the jobs holding index i (and parsed jobs not yet inserted or refused)
	free []uint16        // indexes no job holds, to reuse
}

// maxTimeouts is how many distinct WithTimeout durations the jobs of one
// Router hold at one time; Enqueue refuses one more with ErrInvalidJob.
const maxTimeouts = math.MaxUint16

// errTooManyTimeouts: Enqueue of a job whose WithTimeout would be the
// maxTimeouts+1st distinct duration its Router's jobs hold.
var errTooManyTimeouts = errors.New("more distinct WithTimeout durations held by the Router's jobs at one time than it holds")

// index returns d's index, holding it once more (release gives it back),
// interning d if new; 0 for d == 0. It returns an error wrapping
// ErrInvalidJob when the jobs hold maxTimeouts distinct durations
// already.
func (t *timeouts) index(d time.Duration, id string) (uint16, error) {
	if d == 0 {
		return 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.idx[d]; ok {
		t.refs[i-1]++
		return i, nil
	}
	var i uint16
	switch {
	case len(t.free) > 0:
		i = t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
		t.vals[i-1], t.refs[i-1] = d, 1
	case len(t.vals) == maxTimeouts:
		return 0, fmt.Errorf("%w: WithTimeout(%v) for job %q: %w (%d)", ErrInvalidJob, d, id, errTooManyTimeouts, maxTimeouts)
	default:
		t.vals, t.refs = append(t.vals, d), append(t.refs, 1)
		i = uint16(len(t.vals))
	}
	if t.idx == nil {
		t.idx = make(map[time.Duration]uint16)
	}
	t.idx[d] = i
	return i, nil
}

// release gives back one hold of index i (none for 0): a job holding it
// was dropped, or one parsed with it was refused.
func (t *timeouts) release(i uint16) {
	if i == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.refs[i-1]--; t.refs[i-1] == 0 {
		delete(t.idx, t.vals[i-1])
		t.free = append(t.free, i)
	}
}

// audit checks the holds against holds, the number of jobs in the router
// holding each index: equal (no job is parsed and not yet inserted while
// the caller, Audit, holds the router's lock... except an Enqueue between
// its parse and its lock, whose hold is one more), and the free indexes
// are those no job holds.
func (t *timeouts) audit(holds map[uint16]uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, n := range t.refs {
		if h := holds[uint16(i+1)]; n < h {
			return fmt.Errorf("timeout index %d (%v) has %d holds for %d jobs", i+1, t.vals[i], n, h)
		}
	}
	for _, i := range t.free {
		if t.refs[i-1] != 0 || holds[i] != 0 {
			return fmt.Errorf("timeout index %d is free with %d holds and %d jobs", i, t.refs[i-1], holds[i])
		}
	}
	if len(t.idx)+len(t.free) != len(t.vals) {
		return fmt.Errorf("%d timeouts interned, %d free, %d indexes", len(t.idx), len(t.free), len(t.vals))
	}
	return nil
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
// the worker granted its lease may read it without r.mu. (If the job was
// dropped meanwhile, its index may name another duration by now: the
// lease is lost then, and the handler's ctx canceled already.)
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
