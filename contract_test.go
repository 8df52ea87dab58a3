package leaserouter_test

// Rules the core shares with pgrouter through internal/contract, each
// tested here and, under the same name, in pgrouter/contract_test.go, so
// the two backends give one answer (the conformance suite,
// internal/routertest, takes them as rows).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/hook"
)

// eventBacklog is DESIGN's bound, written out: a test using the package's
// own constant would follow it if it changed.
const eventBacklog = 16384

// TestEventBacklogIs16384: with the hook stuck, producers of new work go
// on until 16384 events are undelivered (the one in the hook included),
// and wait from there.
func TestEventBacklogIs16384(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: g.hook})
		filled := make(chan error, 1)
		go func() {
			for i := range eventBacklog {
				if err := r.Enqueue(fmt.Sprint("j", i), ""); err != nil {
					filled <- err
					return
				}
			}
			filled <- nil
		}()
		synctest.Wait()
		require.NoError(t, receive(t, filled), "16384 enqueues with the hook stuck")
		over := make(chan error, 1)
		go func() { over <- r.Enqueue("over", "") }()
		synctest.Wait()
		requireBlocked(t, over)
		close(g.open)
		synctest.Wait()
		require.NoError(t, receive(t, over))
	})
}

// TestHandlerPanicLastError: a handler's panic fails the attempt with
// LastError "panic: <value>", a blank line and the stack, the same text
// on every backend.
func TestHandlerPanicLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, MaxAttempts: 1})
		require.NoError(t, r.Enqueue("p", ""))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(context.Context, *lease) error { panic("boom") })
		}()
		synctest.Wait()
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
		j := get(t, r, "p")
		require.Equal(t, leaserouter.StateFailed, j.State)
		require.True(t, strings.HasPrefix(j.LastError, "panic: boom\n\n"), "LastError %q", j.LastError)
		require.Contains(t, j.LastError, "goroutine ", "the stack follows")
	})
}

// TestBatchAfterCutLeasesOne: after a Run batch that was cut (its first
// heartbeat came while a job ran long, and the jobs waiting their turn
// were handed back), the worker leases one job at a time again.
func TestBatchAfterCutLeasesOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		// In the ready order: q1 alone, then q2 and q3 (quick: the size
		// doubles to 4), then a batch [a, b, c, d] that a cuts; b leads
		// the next batch.
		for i, id := range []string{"q1", "q2", "q3", "a", "b", "c", "d", "e"} {
			require.NoError(t, r.Enqueue(id, "", leaserouter.WithPriority(100-i)))
		}
		var leasedAtB atomic.Int64
		leasedAtB.Store(-1)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: interval, Batch: 8},
				func(_ context.Context, l *lease) error {
					switch l.JobID {
					case "a":
						time.Sleep(2 * interval) // the batch's first heartbeat cuts it
					case "b":
						if leasedAtB.Load() < 0 {
							leasedAtB.Store(int64(r.Stats().Leased))
						}
					}
					return nil
				})
		}()
		sleep(10 * interval)
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
		require.EqualValues(t, 1, leasedAtB.Load(), "jobs leased when b, first of the batch after the cut one, starts")
	})
}

// TestInvalidOptionsMessages: the options every backend has are refused
// with one set of messages, wrapping ErrInvalidOptions. (A positive
// LeaseDuration below a millisecond is the core's to take; pgrouter's
// floor is a declared difference.)
func TestInvalidOptionsMessages(t *testing.T) {
	for _, c := range invalidOptionCases {
		_, err := leaserouter.New[string](c.opts)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, c.want)
		require.EqualError(t, err, c.want)
	}
	r, err := leaserouter.New[string](leaserouter.Options{LeaseDuration: time.Microsecond})
	require.NoError(t, err, "the core has no floor on LeaseDuration")
	require.NoError(t, r.Close(t.Context()))
}

// invalidOptionCases are the options both backends share, each bad, with
// the message New gives (the same in pgrouter/contract_test.go).
var invalidOptionCases = []struct {
	opts leaserouter.Options
	want string
}{
	{leaserouter.Options{LeaseDuration: -time.Second}, "leaserouter: invalid options: LeaseDuration is -1s, must be > 0 (or 0 for the default 30s)"},
	{leaserouter.Options{MaxAttempts: -1}, "leaserouter: invalid options: MaxAttempts is -1, must be >= 1 (or 0 for the default 5)"},
	{leaserouter.Options{MaxAttempts: 1 << 31}, "leaserouter: invalid options: MaxAttempts is 2147483648, must be <= 2147483647"},
	{leaserouter.Options{TokenFloor: 1 << 63}, "leaserouter: invalid options: TokenFloor is 9223372036854775808, must be < 9223372036854775807 so tokens fit in an int64"},
}

// errorReports returns the messages of rec's records at level Error, each
// with its job_id.
func errorReports(rec *logRecorder) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []string
	for _, r := range rec.recs {
		if r.Level != slog.LevelError {
			continue
		}
		job := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "job_id" {
				job = a.Value.String()
			}
			return true
		})
		out = append(out, r.Message+" job_id="+job)
	}
	return out
}

// TestPanickingBackoffCountedAndReported: a Backoff that panics is
// counted in Stats.CallbackPanics and reported at level Error through the
// Logger, and the attempt is retried after DefaultBackoff.
func TestPanickingBackoffCountedAndReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &logRecorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Logger: slog.New(rec),
			Backoff: func(int) time.Duration { panic("boom") }})
		require.NoError(t, r.Enqueue("j", ""))
		require.NoError(t, acquire(t, r, "w").Fail(errors.New("failed")))
		require.Equal(t, leaserouter.StateScheduled, get(t, r, "j").State, "retried after DefaultBackoff")
		require.EqualValues(t, 1, r.Stats().CallbackPanics)
		require.NoError(t, r.Flush(t.Context()))
		require.Equal(t, []string{"leaserouter: Backoff(1) panicked: boom; used DefaultBackoff job_id=j"}, errorReports(rec))
	})
}

// TestHookPanicReportedThroughLogger: a panic in OnEvent is counted and
// reported at level Error through the configured Logger (not
// slog.Default()), and delivery goes on: the Logger still gets the event.
func TestHookPanicReportedThroughLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &logRecorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Logger: slog.New(rec),
			OnEvent: func(e leaserouter.Event) {
				if e.Kind == leaserouter.EventEnqueued {
					panic("boom")
				}
			}})
		require.NoError(t, r.Enqueue("j", ""))
		require.NoError(t, r.Flush(t.Context()))
		require.Equal(t, []string{"leaserouter: OnEvent panicked on enqueued: boom job_id=j"}, errorReports(rec))
		require.Contains(t, rec.messages(), "enqueued", "the event still reaches the Logger")
		require.EqualValues(t, 1, r.Stats().CallbackPanics)
	})
}

// TestHookGoexitSurvived: an OnEvent that calls runtime.Goexit (as
// t.FailNow does) ends no delivery: it counts as a panic of the hook,
// reported through the Logger, the Logger still gets that event, and
// later events are delivered.
func TestHookGoexitSurvived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &logRecorder{}
		var seen []string
		var mu sync.Mutex
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Logger: slog.New(rec),
			OnEvent: func(e leaserouter.Event) {
				mu.Lock()
				seen = append(seen, e.JobID)
				mu.Unlock()
				if e.JobID == "a" {
					runtime.Goexit()
				}
			}})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, r.Flush(t.Context()))
		require.NoError(t, r.Enqueue("b", ""))
		require.NoError(t, r.Flush(t.Context()))
		mu.Lock()
		require.Equal(t, []string{"a", "b"}, seen)
		mu.Unlock()
		require.Equal(t, []string{"leaserouter: OnEvent called runtime.Goexit on enqueued job_id=a"}, errorReports(rec))
		n := 0
		for _, m := range rec.messages() {
			if m == "enqueued" {
				n++
			}
		}
		require.Equal(t, 2, n, "the Logger gets both events")
		require.EqualValues(t, 1, r.Stats().CallbackPanics)
		require.NoError(t, r.Close(t.Context()))
	})
}

// TestEventHeldOnLeaseEnd: the events that end a lease carry Held, how
// long it was held from its grant: lease_expired to the expiry instant
// (its Time), canceled (of a leased job) to the cancel; and a completed
// event's Time is the instant the job's record shows.
func TestEventHeldOnLeaseEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		got := map[leaserouter.EventKind]leaserouter.Event{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, MaxAttempts: 1, OnEvent: func(e leaserouter.Event) {
			mu.Lock()
			got[e.Kind] = e
			mu.Unlock()
		}})
		require.NoError(t, r.Enqueue("expires", ""))
		acquire(t, r, "w")
		sleep(ld) // expired at its expiry instant
		require.NoError(t, r.Enqueue("canceled", ""))
		acquire(t, r, "w")
		sleep(3 * time.Second)
		require.NoError(t, r.Cancel("canceled"))
		require.NoError(t, r.Enqueue("completed", ""))
		l := acquire(t, r, "w")
		sleep(time.Second)
		require.NoError(t, l.Complete())
		require.NoError(t, r.Flush(t.Context()))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, "expires", got[leaserouter.EventLeaseExpired].JobID)
		require.Equal(t, ld, got[leaserouter.EventLeaseExpired].Held, "lease_expired: held from grant to expiry")
		require.Equal(t, 3*time.Second, got[leaserouter.EventCanceled].Held, "canceled: held from grant to the cancel")
		require.Equal(t, time.Second, got[leaserouter.EventCompleted].Held)
		require.True(t, got[leaserouter.EventCompleted].Time.Equal(get(t, r, "completed").UpdatedAt), "completed: the transition's instant")
	})
}

// TestKeepAliveNilLeaseInvalidOptions: KeepAlive of a nil or zero lease
// returns a context already canceled, its cause wrapping
// ErrInvalidOptions; its cancel func is safe.
func TestKeepAliveNilLeaseInvalidOptions(t *testing.T) {
	for _, l := range []*lease{nil, {}} {
		ctx, cancel := leaserouter.KeepAlive(t.Context(), l, 0)
		require.Error(t, ctx.Err())
		require.ErrorIs(t, context.Cause(ctx), leaserouter.ErrInvalidOptions)
		require.EqualError(t, context.Cause(ctx), "leaserouter: KeepAlive of a nil *Lease: leaserouter: invalid options")
		cancel()
	}
}

// TestKeepAliveSecondCoexists: KeepAlive called twice for one lease keeps
// it alive for both; canceling one leaves the other's context live and
// the lease kept.
func TestKeepAliveSecondCoexists(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		first, cancel1 := leaserouter.KeepAlive(t.Context(), l, ld/5)
		defer cancel1()
		second, cancel2 := leaserouter.KeepAlive(t.Context(), l, ld/5)
		require.NoError(t, first.Err(), "a second KeepAlive does not cancel the first")
		require.NoError(t, second.Err())
		cancel2()
		require.ErrorIs(t, context.Cause(second), context.Canceled)
		sleep(3 * ld) // kept by the first alone
		require.NoError(t, first.Err())
		require.NoError(t, l.Complete())
	})
}

// TestKeepAliveCancelWaitsForHeartbeatInFlight: KeepAlive's cancel func
// returns only after a heartbeat in flight has returned, so no heartbeat
// of it lands after cancel (here the heartbeat is held inside the
// router's lock by a test hook). Real time: a goroutine waiting for a
// mutex is not durably blocked in a synctest bubble.
func TestKeepAliveCancelWaitsForHeartbeatInFlight(t *testing.T) {
	r := setup(t, leaserouter.Options{LeaseDuration: ld})
	require.NoError(t, r.Enqueue("a", ""))
	l := acquire(t, r, "w")
	var hold atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	leaserouter.SetHooks(r, &hook.Hooks{Locked: func() {
		if hold.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
	}})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free() // a failing test still lets the router go
	hold.Store(true)
	kctx, cancel := leaserouter.KeepAlive(t.Context(), l, 10*time.Millisecond)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat")
	}
	canceled := make(chan struct{})
	go func() {
		cancel()
		close(canceled)
	}()
	select {
	case <-canceled:
		t.Fatal("cancel returned while a heartbeat was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	free()
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not return once the heartbeat did")
	}
	require.EqualValues(t, 1, r.Stats().Heartbeats, "the heartbeat in flight had landed when cancel returned")
	require.ErrorIs(t, context.Cause(kctx), context.Canceled)
	require.NoError(t, l.Complete()) // Close need not wait for the lease
}

// TestHandlerResultAfterStop: once Run's ctx is done, a handler that
// still returns nil completes its job, and one that returns an error
// releases it (pending again), not a failed attempt.
func TestHandlerResultAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: func(int) time.Duration { return time.Hour }})
		require.NoError(t, r.Enqueue("ok", ""))
		require.NoError(t, r.Enqueue("err", ""))
		ctx, cancel := context.WithCancel(t.Context())
		var started atomic.Int32
		done := make(chan error, 1)
		go func() {
			done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 2, Batch: 1}, func(hctx context.Context, l *lease) error {
				started.Add(1)
				<-hctx.Done()
				if l.JobID == "err" {
					return errors.New("stopped")
				}
				return nil
			})
		}()
		synctest.Wait()
		require.EqualValues(t, 2, started.Load())
		cancel()
		synctest.Wait()
		require.NoError(t, receive(t, done))
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "ok").State, "nil after the stop: completed")
		require.Equal(t, leaserouter.StatePending, get(t, r, "err").State, "an error after the stop: released")
	})
}
