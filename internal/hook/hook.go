// Package hook holds the Router's test signals: calls that tell a test
// that something happened, as River's testsignal does. The Router decides
// nothing on them: with or without one set, every call and goroutine does
// the same. A test may hold a goroutine in one (the reaper before its
// pass, a call holding the lock), which changes when things happen, never
// what is decided. A Router's hooks pointer is nil unless a test sets it
// (through export_test.go), so every signal costs one nil check.
package hook

import "time"

// Hooks are the points where a Router tells a test what it does.
type Hooks struct {
	// ReaperWoke is called by the reaper each time it wakes (its timer or
	// a kick), before it takes the router's lock for its pass, with
	// nothing between the two: a test that holds it there lets its calls
	// meet what is due before the reaper settles it, as they do whenever
	// the reaper runs late.
	ReaperWoke func()

	// Locked and Unlocking, if set, are called with the router's lock
	// held: Locked just after a call takes the lock through
	// Router.lock (the job calls, lease operations, admin reads and
	// KeepAlive beats; each hold of a List taking several), and Unlocking
	// just before any call releases it through unlockAndDeliver, also
	// after acquisitions Locked did not see (the reaper's, Run's batch
	// holds, Stats, History, Pause/Resume, the periodic calls). With them a test measures
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
