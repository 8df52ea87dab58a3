// Package hook holds the Router's test hooks. A Router's hooks pointer is
// nil unless a test sets it (through export_test.go), so every hook point
// costs one nil check, and most sit off the hot path.
package hook

// Hooks are the points where a test can step into a Router.
type Hooks struct {
	// ReaperChose is called by the reaper when it has chosen an expired
	// lease (job ID and token) and before it requeues the job, with the
	// router's lock released, so a test can land a heartbeat, completion
	// or acquire in between. The reaper re-checks after the hook returns.
	ReaperChose func(jobID string, token uint64)
}
