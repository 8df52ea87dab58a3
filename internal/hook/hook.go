// Package hook holds the Router's test hooks. A Router's hooks pointer is
// nil unless a test sets it (through export_test.go), so every hook point
// costs one nil check, and most sit off the hot path.
package hook

import "time"

// Hooks are the points where a test can step into a Router.
type Hooks struct {
	// ReaperChose is called by the reaper when it has chosen an expired
	// lease (job ID and token) and before it requeues the job, with the
	// router's lock released, so a test can land a heartbeat, completion
	// or acquire in between. The reaper re-checks after the hook returns.
	ReaperChose func(jobID string, token uint64)

	// Locked and Unlocking, if set, are called with the router's lock
	// held: Locked just after any call takes the lock through
	// Router.lock (every call, lease operation and KeepAlive beat; each
	// hold of a List taking several), and Unlocking just before any
	// call releases it through unlockAndDeliver, also after acquisitions
	// Locked did not see (the reaper's). With them a test measures
	// how long the lock is held (without OnEvent: awaitRoom releases the
	// lock without Unlocking). They must not call into the Router.
	Locked, Unlocking func()

	// Beat, if set, is called by each KeepAlive heartbeat in the goroutine
	// that makes it, just before the heartbeat, with the instant it was due
	// (time.Now when its timer was set, plus the interval); the function it
	// returns, if not nil, is called with the heartbeat's result. It is read
	// when KeepAlive starts: set it before. It must not call into the
	// Router.
	Beat func(due time.Time) (done func(err error))
}
