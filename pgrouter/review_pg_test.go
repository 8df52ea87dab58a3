package pgrouter_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestWithTimeoutAtItsLargestStaysALimit: WithTimeout(math.MaxInt64), the
// largest limit a caller can give (a job that must not be cut short by
// WorkerOptions.Timeout), reads back as a positive limit from Get, and
// Run applies it rather than the worker's much shorter Timeout. Stored in
// microseconds rounded up, it is one microsecond more than a Duration
// holds: read back naively it wraps to a negative Duration.
func TestWithTimeoutAtItsLargestStaysALimit(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx, cancel := context.WithCancel(t.Context()) // no deadline of its own: the handler's is the attempt's limit
	defer cancel()
	require.NoError(t, r.Enqueue(ctx, "long", 1, leaserouter.WithTimeout(math.MaxInt64)))
	j, ok, err := r.Get(ctx, "long")
	require.NoError(t, err)
	require.True(t, ok)
	require.Greater(t, j.Timeout, 24*time.Hour, "Job.Timeout of WithTimeout(math.MaxInt64)")

	var deadline time.Time
	var has bool
	err = r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, Timeout: time.Minute}, func(hctx context.Context, _ *pgrouter.Lease[int]) error {
		deadline, has = hctx.Deadline()
		cancel()
		return nil
	})
	require.NoError(t, err)
	require.True(t, has)
	require.True(t, deadline.After(time.Now().Add(24*time.Hour)),
		"the handler's deadline %v: the job's WithTimeout(math.MaxInt64) must override WorkerOptions.Timeout (1m)", deadline)
}

// TestPeriodicFailingTickDoesNotStarveOthers: one periodic job whose tick
// the database refuses every time (its payload is JSON that jsonb does not
// take: a lone surrogate escape) must not stop this Router's other
// periodic jobs: each is scheduled on its own.
func TestPeriodicFailingTickDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	r, db := newRouter[json.RawMessage](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[json.RawMessage]{Name: "bad", Schedule: leaserouter.Every(time.Second),
		Payload: func(time.Time) json.RawMessage { return json.RawMessage(`"\ud800"`) }}))
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[json.RawMessage]{Name: "good", Schedule: leaserouter.Every(time.Second),
		Payload: func(time.Time) json.RawMessage { return json.RawMessage(`1`) }}))
	from := dbNow(t, db)
	awaitDBTime(t, db, from.Add(4*time.Second))
	// Ticks at 1s: at least three of the four whole seconds lived across,
	// asserted generously (the bug leaves at most one).
	require.GreaterOrEqual(t, len(tickJobs(t, db, "default", "good")), 3, "ticks of the healthy periodic job")
	require.Empty(t, tickJobs(t, db, "default", "bad"))
}

// TestRunFailsNegativeSnoozeWhileStopping: Run's doc (and the core) say a
// handler returning Snooze with a negative delay fails its attempt with
// Snooze's error, whether or not Run is stopping: with one attempt the
// job is dead with that error, not released ('attempts exhausted').
func TestRunFailsNegativeSnoozeWhileStopping(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{MaxAttempts: 1})
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	err := r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, _ *pgrouter.Lease[int]) error {
		cancel()
		<-hctx.Done()
		return leaserouter.Snooze(-time.Second)
	})
	require.NoError(t, err)
	require.NoError(t, pgrouter.AwaitBackground(t.Context(), r))
	j, _, err := r.Get(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, j.State)
	require.Contains(t, j.LastError, "Snooze(-1s), must be >= 0")
}
