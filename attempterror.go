package leaserouter

import (
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// AttemptError is the record of one failed attempt of a job, as
// Job.Errors lists them (River's AttemptError, with the worker instead
// of a trace: a panic's stack is in Error).
//
// An attempt counts as failed, and leaves a record, when it ends by:
//   - Lease.Fail, with its cause's message (a Permanent one too; "unknown
//     error" for a nil cause) — a handler of Run that returned an error,
//     or ran out of its timeout (WithTimeout, WorkerOptions.Timeout);
//   - a panic of Run's handler, recovered: "panic: <value>", a blank
//     line and the stack;
//   - the expiry of its lease: "lease expired", Worker the holder whose
//     lease expired.
//
// An attempt that ends any other way leaves none: completed; released
// by its holder (Lease.Release); snoozed (Lease.Snooze, which does not
// count the attempt either); handed back unstarted by Run; canceled by
// Router.Cancel while leased (the operator's decision, not the
// attempt's failure); revoked by Close. A job that becomes dead with no
// failure of its own (its last lease released) has LastError "attempts
// exhausted" and no record for it.
type AttemptError struct {
	Attempt int       // the attempt's number, Job.Attempt while it ran: 1 for the first lease
	At      time.Time // when the attempt ended: the failure, or the lease's expiry instant
	Worker  string    // the worker ID of the lease's holder
	Error   string    // the error's text, at most MaxErrorBytes bytes
}

// MaxAttemptErrors is the most records a job keeps in Job.Errors: the
// most recent ones; an older one is dropped when a failure beyond it
// is recorded (Attempt tells which are kept). A job retried without
// end (MaxAttempts huge, or Router.Retry again and again) so keeps at
// most this many records in a database's row, and a Router holds at most
// about twice as many per job in memory (the records sit in an array with
// room for twice as many, whose older entries, which snapshots may still
// share, go only when it is replaced): with errors of
// MaxErrorBytes, some 200 KiB for such a job. On PostgreSQL each failure
// rewrites the job's whole history (as River's errors column is), so a
// job failing again and again with long errors writes up to
// MaxAttemptErrors × MaxErrorBytes a failure.
const MaxAttemptErrors = contract.MaxAttemptErrors

// MaxErrorBytes is the longest error text, in bytes, a job keeps, in
// LastError and in each AttemptError: a longer message (a deep panic
// stack, say) is cut to its first MaxErrorBytes bytes, at a rune
// boundary (valid UTF-8 stays valid). Event.Err keeps the whole error.
const MaxErrorBytes = contract.MaxErrorBytes

// failures is what a job's record keeps of its failures: LastError, and
// the records of its failed attempts (appendError: records within a
// length handed out are never written again, so snapshots share them).
// Guarded by the router's mu, as the record is.
type failures struct {
	last string
	errs []AttemptError
}

// lastError is f's LastError; "" for a nil f.
func (f *failures) lastError() string {
	if f == nil {
		return ""
	}
	return f.last
}

// history is f's Errors (attemptErrors: shared, O(1)); nil for a nil f.
func (f *failures) history() []AttemptError {
	if f == nil {
		return nil
	}
	return attemptErrors(f.errs)
}

// setLastError makes text j's LastError, without a record.
func (j *job[T]) setLastError(text string) {
	if j.fails == nil {
		j.fails = new(failures)
	}
	j.fails.last = text
}

// recordFailure makes e's text j's LastError and appends e to its
// history. The caller holds the router's mu.
func (j *job[T]) recordFailure(e AttemptError) {
	j.setLastError(e.Error)
	j.fails.errs = appendError(j.fails.errs, e)
}

// appendError returns h with e appended, keeping the most recent
// MaxAttemptErrors records at the end of the result (attemptErrors
// reads them). Under the router's lock, it costs O(1) amortized:
// snapshots (row) share h's backing array and copy their part once the
// lock is released, so records within any length handed out are never
// written again. An append either writes past every such length (room
// left), or, once the array is full, moves the newest
// MaxAttemptErrors-1 records to a new array of twice that room,
// leaving the old one to the snapshots that share it: a move of
// MaxAttemptErrors records every MaxAttemptErrors+1 or so appends, and
// at most about 2*MaxAttemptErrors records held per job.
func appendError(h []AttemptError, e AttemptError) []AttemptError {
	if len(h) == cap(h) && len(h) >= MaxAttemptErrors {
		n := make([]AttemptError, MaxAttemptErrors-1, 2*MaxAttemptErrors)
		copy(n, h[len(h)-(MaxAttemptErrors-1):])
		h = n
	}
	return append(h, e)
}

// attemptErrors is the history h holds (the last MaxAttemptErrors
// records), sharing h's array, its capacity cut to its length so that
// nobody appends into it; nil when none. O(1).
func attemptErrors(h []AttemptError) []AttemptError {
	if len(h) == 0 {
		return nil
	}
	lo := max(0, len(h)-MaxAttemptErrors)
	return h[lo:len(h):len(h)]
}
