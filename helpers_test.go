package leaserouter_test

// Helpers shared by the black-box tests. Each test file mirrors a source
// file (run_test.go tests run.go, ...); whole-system suites keep files of
// their own (race, harness, chaos, fuzz, linearizability, bad input,
// monotonic, memory). Time is driven with testing/synctest: inside a
// bubble time.Sleep advances a fake clock at once, and synctest.Wait lets
// every other goroutine of the bubble (the reaper, event delivery, workers)
// run until it blocks. Boundaries are probed at d-1ns and at d.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

// ld is the LeaseDuration of most tests.
const ld = 10 * time.Second

type (
	router = leaserouter.Router[string]
	lease  = leaserouter.Lease[string]
	job    = leaserouter.Job[string]
)

// setup returns a Router that is closed, then audited, when the test ends.
func setup(t *testing.T, opts leaserouter.Options) *router {
	t.Helper()
	r, err := leaserouter.New[string](opts)
	require.NoError(t, err)
	require.NotNil(t, r)
	t.Cleanup(func() {
		// Bounded so that a test failing while it holds a lease still ends (in
		// a bubble the hour passes at once). Tests that care about Close's
		// result call it themselves; this second call then returns nil.
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		_ = r.Close(ctx)
		require.NoError(t, r.Audit(), "Audit after the scenario")
	})
	return r
}

func acquire(t *testing.T, r *router, worker string) *lease {
	t.Helper()
	l, err := r.TryAcquire(worker)
	require.NoError(t, err)
	require.NotNil(t, l)
	return l
}

func get(t *testing.T, r *router, id string) job {
	t.Helper()
	j, ok := r.Get(id)
	require.True(t, ok, "job %q not found", id)
	return j
}

func requireGone(t *testing.T, r *router, id string) {
	t.Helper()
	j, ok := r.Get(id)
	require.False(t, ok, "job %q still known: %+v", id, j)
}

func requireNoJob(t *testing.T, r *router) {
	t.Helper()
	l, err := r.TryAcquire("probe")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "got lease %+v", l)
	require.Nil(t, l)
}

func requireTime(t *testing.T, want, got time.Time, format string, args ...any) {
	t.Helper()
	require.True(t, want.Equal(got), "want %v, got %v: %s", want, got, fmt.Sprintf(format, args...))
}

// sleep advances the bubble's clock by d, then lets every goroutine of the
// bubble run until it blocks.
func sleep(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// requireLost checks err is a lost-lease refusal for token with the job's
// current token.
func requireLost(t *testing.T, err error, token, current leaserouter.Token) *leaserouter.LeaseLostError {
	t.Helper()
	require.ErrorIs(t, err, leaserouter.ErrLeaseLost)
	var lle *leaserouter.LeaseLostError
	require.ErrorAs(t, err, &lle)
	require.Equal(t, token, lle.Token, "LeaseLostError.Token")
	require.Equal(t, current, lle.Current, "LeaseLostError.Current")
	return lle
}

func noBackoff(int) time.Duration { return 0 }

func hourBackoff(int) time.Duration { return time.Hour }

// recorder is an OnEvent hook that keeps every event.
type recorder struct {
	mu  sync.Mutex
	evs []leaserouter.Event
}

func (rec *recorder) record(e leaserouter.Event) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.evs = append(rec.evs, e)
}

func (rec *recorder) all() []leaserouter.Event {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.evs)
}

func (rec *recorder) of(id string) []leaserouter.Event {
	var out []leaserouter.Event
	for _, e := range rec.all() {
		if e.JobID == id {
			out = append(out, e)
		}
	}
	return out
}

// kinds gives the log messages of job id's events, in order.
func (rec *recorder) kinds(id string) []string { return kindNames(rec.of(id)) }

func (rec *recorder) ofKind(k leaserouter.EventKind) []leaserouter.Event {
	var out []leaserouter.Event
	for _, e := range rec.all() {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func (rec *recorder) last(t *testing.T, id string) leaserouter.Event {
	t.Helper()
	evs := rec.of(id)
	require.NotEmpty(t, evs, "no events for %q", id)
	return evs[len(evs)-1]
}

func kindNames(evs []leaserouter.Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Kind.String())
	}
	return out
}

type result struct {
	l   *lease
	err error
}

func goAcquire(ctx context.Context, r *router, worker string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := r.Acquire(ctx, worker)
		ch <- result{l, err}
	}()
	return ch
}

func goClose(ctx context.Context, r *router) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- r.Close(ctx) }()
	return ch
}

func goRun(ctx context.Context, r *router, opts leaserouter.WorkerOptions, h leaserouter.Handler[string]) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- r.Run(ctx, opts, h) }()
	return ch
}

// stopRun cancels Run's ctx and checks that Run returned nil once every
// goroutine of the bubble has settled.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	synctest.Wait()
	require.NoError(t, receive(t, done))
}

// requireBlocked checks nothing has been sent on ch yet.
func requireBlocked[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("returned too early: %+v", v)
	default:
	}
}

// receive takes the value already sent on ch.
func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatal("has not returned")
		panic("unreachable")
	}
}
