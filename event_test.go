package leaserouter_test

// Tests of event delivery (event.go): delivery by the Router's own
// goroutine, off every caller's path; the bounded backlog; hooks that
// panic or call Close.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// gate is an OnEvent hook that blocks every call until opened, counting
// the events it has seen.
type gate struct {
	open chan struct{}
	seen atomic.Int64
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) hook(leaserouter.Event) {
	g.seen.Add(1)
	<-g.open
}

// TestDeliveryOffLeasePath: with OnEvent stuck in a call, every lease
// operation and Cancel still returns at once, and the events all arrive,
// in order, once the hook moves again. (Before delivery had a goroutine of
// its own, the caller that found events waiting delivered them: here the
// first Heartbeat would block in the hook for good.)
func TestDeliveryOffLeasePath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		var mu sync.Mutex
		var kinds []string
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: noBackoff, OnEvent: func(e leaserouter.Event) {
			g.hook(e)
			mu.Lock()
			kinds = append(kinds, e.Kind.String())
			mu.Unlock()
		}})
		for _, id := range []string{"a", "b", "c", "d"} {
			require.NoError(t, r.Enqueue(id, ""))
		}
		synctest.Wait()
		require.EqualValues(t, 1, g.seen.Load(), "the hook is stuck in its first call")

		a, b, c, d := acquire(t, r, "w"), acquire(t, r, "w"), acquire(t, r, "w"), acquire(t, r, "w")
		require.NoError(t, a.Heartbeat([]byte("cp")))
		require.NoError(t, a.Complete())
		require.NoError(t, b.Fail(errors.New("boom")))
		require.NoError(t, c.Release())
		require.NoError(t, r.Cancel("d"))
		requireLost(t, d.Heartbeat(nil), d.Token, d.Token)
		kctx, stop := leaserouter.KeepAlive(context.Background(), acquire(t, r, "w"), time.Second)
		sleep(time.Second) // one KeepAlive heartbeat, through the stuck hook
		require.NoError(t, kctx.Err())
		stop()
		synctest.Wait()
		require.EqualValues(t, 1, g.seen.Load(), "still stuck: nothing above waited for it")

		close(g.open)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"enqueued", "enqueued", "enqueued", "enqueued",
			"lease_acquired", "lease_acquired", "lease_acquired", "lease_acquired",
			"lease_extended", "completed", "failed", "retry_scheduled", "released",
			"canceled", "stale_rejected", "lease_acquired", "lease_extended"}, kinds)
	})
}

// TestBacklogBounded: while the hook is stuck, Enqueue and TryAcquire wait
// once EventBacklog events are undelivered, lease operations never do, and
// the producers go on when the backlog is down to half.
func TestBacklogBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: g.hook})
		require.NoError(t, r.Enqueue("held", ""))
		held := acquire(t, r, "w")
		n := 2 // events so far
		for n < leaserouter.EventBacklog {
			require.NoError(t, r.Enqueue(string(rune('a'+n%26))+time.Duration(n).String(), ""))
			n++
		}
		enq := make(chan error, 1)
		go func() { enq <- r.Enqueue("over", "") }()
		try := make(chan error, 1)
		go func() {
			_, err := r.TryAcquire("w")
			try <- err
		}()
		ctx, cancel := context.WithCancel(context.Background())
		acq := goAcquire(ctx, r, "w")
		synctest.Wait()
		requireBlocked(t, enq)
		requireBlocked(t, try)
		requireBlocked(t, acq)

		// Lease operations go on, adding to the backlog beyond the bound.
		for range 10 {
			sleep(time.Second)
			require.NoError(t, held.Heartbeat(nil))
		}
		cancel()
		synctest.Wait()
		require.ErrorIs(t, receive(t, acq).err, context.Canceled, "Acquire waiting for room honours its ctx")
		requireBlocked(t, enq)

		close(g.open)
		synctest.Wait()
		require.NoError(t, receive(t, enq))
		require.NoError(t, receive(t, try))
		// After a batch that large, delivery lingers before taking the
		// events that came meanwhile.
		sleep(leaserouter.Linger)
		require.EqualValues(t, leaserouter.EventBacklog+10+2, g.seen.Load())
	})
}

// TestBacklogProducerFromHook: an OnEvent that enqueues while the backlog
// is full is not made to wait for its own delivery.
func TestBacklogProducerFromHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r *router
		release := make(chan struct{})
		follow := make(chan error, 1)
		r = setup(t, leaserouter.Options{OnEvent: func(e leaserouter.Event) {
			if e.JobID == "first" && e.Kind == leaserouter.EventEnqueued {
				<-release // let the test fill the backlog behind this event
				follow <- r.Enqueue("follow-up", "")
			}
		}})
		require.NoError(t, r.Enqueue("first", ""))
		for i := range leaserouter.EventBacklog - 1 { // the backlog is full after these

			require.NoError(t, r.Enqueue(time.Duration(i).String(), ""))
		}
		synctest.Wait()
		close(release)
		synctest.Wait()
		require.NoError(t, receive(t, follow))
		require.Equal(t, leaserouter.StatePending, get(t, r, "follow-up").State)
	})
}

// panicHandler is a slog.Handler whose Handle panics.
type panicHandler struct{ logRecorder }

func (h *panicHandler) Handle(context.Context, slog.Record) error { panic("bad handler") }

// useDefaultLogger makes slog.Default() write to h for the rest of the test.
func useDefaultLogger(t *testing.T, h slog.Handler) {
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
}

// TestLoggerPanicRecovered: a Logger handler that panics never reaches the
// caller; OnEvent goes on getting every event; the panics are counted and
// reported to slog.Default(); Close returns at once.
func TestLoggerPanicRecovered(t *testing.T) {
	def := &logRecorder{}
	useDefaultLogger(t, def)
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{Logger: slog.New(&panicHandler{}), OnEvent: rec.record})
		require.NotPanics(t, func() { require.NoError(t, r.Enqueue("a", "")) })
		require.NoError(t, acquire(t, r, "w").Complete())
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		require.NoError(t, r.Close(ctx))
		require.Zero(t, time.Since(t0), "Close did not wait for its ctx")
		require.Equal(t, []string{"enqueued", "lease_acquired", "completed"}, rec.kinds("a"))
		require.EqualValues(t, 3, r.Stats().CallbackPanics)
		require.Len(t, def.messages(), 3)
		require.Contains(t, def.messages()[0], "Logger handler panicked on enqueued")
	})
}

// TestOnEventPanicReported: a panicking OnEvent is reported through the
// Logger at level Error and counted.
func TestOnEventPanicReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &logRecorder{}
		r := setup(t, leaserouter.Options{Logger: slog.New(h), OnEvent: func(e leaserouter.Event) {
			if e.Kind == leaserouter.EventEnqueued {
				panic("bad hook")
			}
		}})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, r.Close(context.Background()))
		require.EqualValues(t, 1, r.Stats().CallbackPanics)
		require.Equal(t, []string{"leaserouter: OnEvent panicked on enqueued: bad hook", "enqueued"}, h.messages())
		h.mu.Lock()
		defer h.mu.Unlock()
		require.Equal(t, slog.LevelError, h.recs[0].Level)
	})
}

// TestCloseFromOnEvent: Close called from OnEvent, on an event of a
// caller's transition or of the reaper's, returns without waiting for the
// delivery it is part of (before, it waited for itself for ever); the
// caller and a later Close return too, and every event is delivered.
func TestCloseFromOnEvent(t *testing.T) {
	for _, tt := range []struct {
		name    string
		trigger leaserouter.EventKind
	}{
		{"caller's event", leaserouter.EventEnqueued},
		{"reaper's event", leaserouter.EventLeaseExpired},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var r *router
				closed := make(chan error, 1)
				var took time.Duration
				rec := &recorder{}
				r = setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: func(e leaserouter.Event) {
					rec.record(e)
					if e.Kind == tt.trigger && e.JobID == "a" {
						ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
						defer cancel()
						t0 := time.Now()
						closed <- r.Close(ctx)
						took = time.Since(t0)
					}
				}})
				require.NoError(t, r.Enqueue("a", ""))
				if tt.trigger == leaserouter.EventLeaseExpired {
					acquire(t, r, "crashed")
					sleep(ld)
				}
				synctest.Wait()
				require.NoError(t, receive(t, closed))
				require.Zero(t, took, "Close from the hook returned at once")
				require.ErrorIs(t, r.Enqueue("b", ""), leaserouter.ErrClosed)
				require.NoError(t, r.Close(context.Background()))
				want := []string{"enqueued"}
				if tt.trigger == leaserouter.EventLeaseExpired {
					want = []string{"enqueued", "lease_acquired", "lease_expired"}
				}
				require.Equal(t, want, rec.kinds("a"))
			})
		})
	}
}

// TestCloseFromOnEventWhileReaperWaitsForRoom: a mass expiry filled the
// backlog, so the reaper waits for room between batches, when OnEvent
// calls Close, which waits for a lease that expires later. The reaper must
// not wait for room once Close has begun, or no one settles that expiry
// and Close (from the hook, so the room never comes) waits for ever.
func TestCloseFromOnEventWhileReaperWaitsForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var block, closed atomic.Bool
		release := make(chan struct{})
		var r *router
		r = setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: func(leaserouter.Event) {
			if block.CompareAndSwap(true, false) {
				<-release
				_ = r.Close(context.Background())
				closed.Store(true)
			}
		}})
		n := leaserouter.EventBacklog + 1000
		for i := range n {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
		}
		require.NoError(t, r.Enqueue("late", ""))
		for range n {
			acquire(t, r, "crashed")
		}
		sleep(ld / 2)
		acquire(t, r, "crashed") // "late", expiring ld/2 after the others
		block.Store(true)
		sleep(ld/2 + time.Millisecond) // the n expire: the reaper fills the backlog
		require.GreaterOrEqual(t, leaserouter.Backlog(r), leaserouter.EventBacklog)
		close(release)
		sleep(ld)
		require.True(t, closed.Load(), "Close from the hook still waiting for the drain")
	})
}

// TestOnEventGoexitRecovered: a hook that calls runtime.Goexit (t.FailNow
// in a test's OnEvent) ends the delivery goroutine; a new one goes on
// from the next event, so no event is lost, producers are not left
// waiting, and Close returns.
func TestOnEventGoexitRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &logRecorder{}
		rec := &recorder{}
		r := setup(t, leaserouter.Options{Logger: slog.New(h), OnEvent: func(e leaserouter.Event) {
			if e.JobID == "a" && e.Kind == leaserouter.EventEnqueued {
				runtime.Goexit()
			}
			rec.record(e)
		}})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, acquire(t, r, "w").Complete())
		for i := range leaserouter.EventBacklog {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""), "producers are not left waiting")
		}
		require.NoError(t, r.Close(context.Background()))
		require.Equal(t, []string{"lease_acquired", "completed"}, rec.kinds("a"))
		require.Len(t, rec.all(), leaserouter.EventBacklog+2)
		require.EqualValues(t, 1, r.Stats().CallbackPanics)
		msgs := h.messages()
		require.Equal(t, []string{"leaserouter: OnEvent called runtime.Goexit on enqueued", "enqueued"}, msgs[:2],
			"reported, and the Logger still got the event")
	})
}

// TestCloseHonoursCtxWithStuckHook: a hook that never returns cannot hold
// Close beyond its ctx; a second Close waits for delivery to end.
func TestCloseHonoursCtxWithStuckHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		r := setup(t, leaserouter.Options{OnEvent: g.hook})
		require.NoError(t, r.Enqueue("a", ""))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		require.ErrorIs(t, r.Close(ctx), context.DeadlineExceeded)
		require.Equal(t, 300*time.Millisecond, time.Since(t0))
		again := goClose(context.Background(), r)
		synctest.Wait()
		requireBlocked(t, again)
		close(g.open)
		synctest.Wait()
		require.NoError(t, receive(t, again))
	})
}

// TestBackoffPanicRecovered: a Backoff that panics does not leave the
// router locked; the retry uses DefaultBackoff and the panic is reported
// and counted.
func TestBackoffPanicRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &logRecorder{}
		r := setup(t, leaserouter.Options{Logger: slog.New(h), Backoff: func(int) time.Duration { panic("bad backoff") }})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NotPanics(t, func() { require.NoError(t, l.Fail(errors.New("boom"))) })
		j := get(t, r, "a")
		require.Equal(t, leaserouter.StateScheduled, j.State)
		// DefaultBackoff(1) is in [0.5s, 1s).
		wait := time.Until(j.RunAt)
		require.GreaterOrEqual(t, wait, 500*time.Millisecond)
		require.Less(t, wait, time.Second)
		require.NoError(t, r.Enqueue("b", ""), "the router is not left locked")
		require.EqualValues(t, 1, r.Stats().CallbackPanics)
		synctest.Wait()
		require.Contains(t, h.messages(), "leaserouter: Backoff(1) panicked: bad backoff; used DefaultBackoff")
	})
}

// TestBackoffPanicWithoutLogger: with no Logger the report goes to
// slog.Default().
func TestBackoffPanicWithoutLogger(t *testing.T) {
	def := &logRecorder{}
	useDefaultLogger(t, def)
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{Backoff: func(int) time.Duration { panic("bad backoff") }})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, acquire(t, r, "w").Fail(nil))
		require.Equal(t, leaserouter.StateScheduled, get(t, r, "a").State)
		require.Equal(t, []string{"leaserouter: Backoff(1) panicked: bad backoff; used DefaultBackoff"}, def.messages())
	})
}

// spin2us is an OnEvent hook that costs 2µs of CPU, like a metrics hook
// doing a little work per event.
func spin2us(leaserouter.Event) {
	for t0 := time.Now(); time.Since(t0) < 2*time.Microsecond; {
	}
}

// heartbeatsUnderLoad runs two producers looping Enqueue + TryAcquire +
// Complete on a Router with hook (nil for none) while a lease of duration
// lease is heartbeated every interval, n times, and returns each
// heartbeat's latency and error.
func heartbeatsUnderLoad(tb testing.TB, hook func(leaserouter.Event), lease, interval time.Duration, n int) ([]time.Duration, []error) {
	r, err := leaserouter.New[int](leaserouter.Options{LeaseDuration: lease, Retention: -1, OnEvent: hook})
	require.NoError(tb, err)
	defer r.Close(context.Background())
	require.NoError(tb, r.Enqueue("held", 0, leaserouter.WithPriority(1)))
	held, err := r.TryAcquire("keeper")
	require.NoError(tb, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = r.Enqueue(strconv.Itoa(p)+"-"+strconv.Itoa(i), i)
				if l, err := r.TryAcquire("producer"); err == nil {
					_ = l.Complete()
				}
			}
		})
	}
	lat := make([]time.Duration, 0, n)
	var errs []error
	tick := time.NewTicker(interval)
	for range n {
		<-tick.C
		t0 := time.Now()
		err := held.Heartbeat(nil)
		lat = append(lat, time.Since(t0))
		errs = append(errs, err)
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	_ = held.Release() // so Close need not wait for it
	return lat, errs
}

// TestHeartbeatUnaffectedByHookLoad, in real time because the defect was
// about real scheduling: with a 2µs OnEvent and two goroutines producing
// events as fast as they can, an 80ms lease heartbeated every 10ms is never
// lost. (Before, the heartbeating goroutine delivered the others' events
// and lost its lease by the 5th to 7th heartbeat.)
func TestHeartbeatUnaffectedByHookLoad(t *testing.T) {
	lat, errs := heartbeatsUnderLoad(t, spin2us, 80*time.Millisecond, 10*time.Millisecond, 30)
	for i, err := range errs {
		require.NoError(t, err, "heartbeat %d (latency %v)", i+1, lat[i])
	}
	slices.Sort(lat)
	t.Logf("heartbeat latency p50 %v, max %v", lat[len(lat)/2], lat[len(lat)-1])
}

// BenchmarkHeartbeatLatency reports Heartbeat latency (p50-µs, p99-µs)
// under two busy producers, with no hook and with a 2µs hook; the second
// must stay within 2 × the first. One heartbeat per millisecond of a 1s
// lease (so ns/op is about a millisecond and says nothing); run with
// -benchtime 2000x for stable percentiles.
func BenchmarkHeartbeatLatency(b *testing.B) {
	for _, bc := range []struct {
		name string
		hook func(leaserouter.Event)
	}{{"no-hook", nil}, {"hook-2us", spin2us}} {
		b.Run(bc.name, func(b *testing.B) {
			lat, errs := heartbeatsUnderLoad(b, bc.hook, time.Second, time.Millisecond, b.N)
			require.NoError(b, errors.Join(errs...))
			slices.Sort(lat)
			us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e3 }
			b.ReportMetric(us(0.5), "p50-µs")
			b.ReportMetric(us(0.99), "p99-µs")
		})
	}
}

// TestBackoffPanicAfterClose: a Fail refused after Close changes no count,
// even when Backoff panics; the panic is still reported.
func TestBackoffPanicAfterClose(t *testing.T) {
	def := &logRecorder{}
	useDefaultLogger(t, def)
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{OnEvent: rec.record, Backoff: func(int) time.Duration { panic("bad backoff") }})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, r.Close(ctx), context.Canceled)
		require.NoError(t, r.Close(context.Background()))
		before := r.Stats()
		require.ErrorIs(t, l.Fail(errors.New("late")), leaserouter.ErrLeaseLost)
		require.Equal(t, before, r.Stats(), "after Close nothing changes")
		require.Equal(t, []string{"leaserouter: Backoff(1) panicked: bad backoff; used DefaultBackoff"}, def.messages())
	})
}

// goexitHandler is a slog.Handler that calls runtime.Goexit on records at
// or above min (as a test handler doing t.Fatal on errors would) and keeps
// the rest.
type goexitHandler struct {
	logRecorder
	min slog.Level
}

func (h *goexitHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= h.min {
		runtime.Goexit()
	}
	return h.logRecorder.Handle(ctx, r)
}

func (h *goexitHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *goexitHandler) WithGroup(string) slog.Handler      { return h }

// TestLoggerGoexitWhileReporting: a Logger that ends the delivery
// goroutine while a panic is being reported through it, or on every
// record, loses no event for OnEvent and crashes nothing. (Before, the
// replacement goroutine blamed the next event, skipped hook calls and
// indexed past the batch.)
func TestLoggerGoexitWhileReporting(t *testing.T) {
	for _, tt := range []struct {
		name     string
		min      slog.Level
		panicsOn string
	}{
		{"on reports of an OnEvent panic", slog.LevelError, "a"},
		{"on every record", slog.LevelDebug, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := &goexitHandler{min: tt.min}
				rec := &recorder{}
				r := setup(t, leaserouter.Options{Logger: slog.New(h), OnEvent: func(e leaserouter.Event) {
					if e.JobID == tt.panicsOn {
						panic("bad hook")
					}
					rec.record(e)
				}})
				ids := []string{"a", "b", "c", "d"}
				for _, id := range ids {
					require.NoError(t, r.Enqueue(id, ""))
				}
				require.NoError(t, r.Close(context.Background()))
				want := ids
				if tt.panicsOn != "" {
					want = ids[1:]
				}
				var got []string
				for _, e := range rec.all() {
					got = append(got, e.JobID)
				}
				require.Equal(t, want, got)
				if tt.min == slog.LevelError {
					require.Equal(t, []string{"enqueued", "enqueued", "enqueued", "enqueued"}, h.messages(),
						"the Logger got every event, the one OnEvent panicked on included")
				}
			})
		})
	}
}

// TestStaleRetriesBoundBacklog: a stale holder retrying a refused
// operation in a loop waits for room like a producer, so the backlog
// stays bounded while the hook is stuck. Run's and KeepAlive's heartbeats
// stop at their first refusal instead.
func TestStaleRetriesBoundBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: g.hook})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NoError(t, r.Cancel("a"))
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 2 * leaserouter.EventBacklog {
				requireLost(t, l.Heartbeat(nil), l.Token, l.Token)
			}
		}()
		synctest.Wait()
		require.LessOrEqual(t, leaserouter.Backlog(r), leaserouter.EventBacklog, "the retries wait")
		requireBlocked(t, done)
		close(g.open)
		synctest.Wait()
		receive(t, done)
	})
}

// errorPanicHandler is a slog.Handler that panics on records at level
// Error and keeps the rest.
type errorPanicHandler struct{ logRecorder }

func (h *errorPanicHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		panic("bad handler")
	}
	return h.logRecorder.Handle(ctx, r)
}

// TestReportFallsBackWhenLoggerPanics: the report of an OnEvent panic goes
// to slog.Default() when the Logger panics on it, and both panics count.
func TestReportFallsBackWhenLoggerPanics(t *testing.T) {
	def := &logRecorder{}
	useDefaultLogger(t, def)
	synctest.Test(t, func(t *testing.T) {
		h := &errorPanicHandler{}
		r := setup(t, leaserouter.Options{Logger: slog.New(h), OnEvent: func(leaserouter.Event) { panic("bad hook") }})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, r.Close(context.Background()))
		require.Equal(t, []string{"leaserouter: OnEvent panicked on enqueued: bad hook"}, def.messages())
		require.Equal(t, []string{"enqueued"}, h.messages())
		require.EqualValues(t, 2, r.Stats().CallbackPanics)
	})
}

func TestEventKindStrings(t *testing.T) {
	want := []string{"enqueued", "duplicate", "lease_acquired", "lease_extended",
		"lease_expired", "completed", "failed", "retry_scheduled", "dead",
		"stale_rejected", "released", "canceled", "purged"}
	kinds := []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventDuplicate,
		leaserouter.EventLeaseAcquired, leaserouter.EventLeaseExtended, leaserouter.EventLeaseExpired,
		leaserouter.EventCompleted, leaserouter.EventFailed, leaserouter.EventRetryScheduled,
		leaserouter.EventDead, leaserouter.EventStaleRejected, leaserouter.EventReleased,
		leaserouter.EventCanceled, leaserouter.EventPurged}
	for i, k := range kinds {
		require.Equal(t, leaserouter.EventKind(i+1), k, "EventKind values start at 1")
		require.Equal(t, want[i], k.String())
	}
}

func TestEventsTellTheWholeStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Retention: -1, OnEvent: rec.record,
			Backoff: func(int) time.Duration { return 5 * time.Second }})
		t0 := time.Now()
		boom := errors.New("boom")
		require.NoError(t, r.Enqueue("a", ""))
		l1 := acquire(t, r, "w1")
		sleep(time.Second)
		require.NoError(t, l1.Heartbeat(nil))
		require.NoError(t, l1.Fail(boom)) // t0+1s, ready t0+6s
		sleep(5 * time.Second)
		l2 := acquire(t, r, "w2")
		require.NoError(t, l2.Release())
		l3 := acquire(t, r, "w3") // t0+6s, expires t0+16s
		sleep(ld)
		l4 := acquire(t, r, "w4")
		requireLost(t, l1.Complete(), l1.Token, l4.Token)
		require.NoError(t, l4.Complete())
		synctest.Wait()

		evs := rec.of("a")
		require.Equal(t, []string{"enqueued",
			"lease_acquired", "lease_extended", "failed", "retry_scheduled",
			"lease_acquired", "released",
			"lease_acquired", "lease_expired",
			"lease_acquired", "stale_rejected", "completed", "purged"}, kindNames(evs))

		type want struct {
			worker  string
			token   leaserouter.Token
			attempt int
			at      time.Duration
		}
		// failed and retry_scheduled promise no WorkerID or Token; the
		// token rule below still bounds theirs.
		loose := map[leaserouter.EventKind]bool{leaserouter.EventFailed: true,
			leaserouter.EventRetryScheduled: true, leaserouter.EventStaleRejected: true}
		wants := []want{
			{"", 0, 0, 0},
			{"w1", l1.Token, 1, 0}, {"w1", l1.Token, 1, time.Second}, {"w1", l1.Token, 1, time.Second}, {"w1", l1.Token, 1, time.Second},
			{"w2", l2.Token, 2, 6 * time.Second}, {"w2", l2.Token, 2, 6 * time.Second},
			{"w3", l3.Token, 3, 6 * time.Second}, {"w3", l3.Token, 3, 16 * time.Second},
			{"w4", l4.Token, 4, 16 * time.Second}, {"", l1.Token, 0, 16 * time.Second}, {"w4", l4.Token, 4, 16 * time.Second},
		}
		for i, w := range wants {
			e := evs[i]
			requireTime(t, t0.Add(w.at), e.Time, "event %d %v", i, e.Kind)
			if e.Kind == leaserouter.EventStaleRejected || !loose[e.Kind] {
				require.Equal(t, w.token, e.Token, "event %d %v", i, e.Kind)
			}
			if e.Kind != leaserouter.EventStaleRejected {
				require.Equal(t, w.attempt, e.Attempt, "event %d %v", i, e.Kind)
			}
			if !loose[e.Kind] {
				require.Equal(t, w.worker, e.WorkerID, "event %d %v", i, e.Kind)
			}
		}
		require.ErrorIs(t, evs[3].Err, boom, "failed carries the cause")
		require.ErrorIs(t, evs[10].Err, leaserouter.ErrLeaseLost, "stale_rejected carries the refusal")

		// After lease_acquired with token t, no event carries an older token
		// except stale_rejected.
		var latest leaserouter.Token
		for i, e := range evs {
			if e.Kind == leaserouter.EventLeaseAcquired {
				latest = e.Token
			}
			if e.Kind != leaserouter.EventStaleRejected && e.Token != 0 {
				require.GreaterOrEqual(t, e.Token, latest, "event %d %v", i, e.Kind)
			}
		}
		// Delivered in the order the transitions happened.
		all := rec.all()
		for i := 1; i < len(all); i++ {
			require.False(t, all[i].Time.Before(all[i-1].Time), "event %d %v before event %d", i, all[i].Kind, i-1)
		}
	})
}

func TestOnEventMayCallBackIntoRouter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			r    *router
			mu   sync.Mutex
			errs []error
			seen int
		)
		onEvent := func(e leaserouter.Event) {
			// Everything here would deadlock if called under the router's lock.
			_, _ = r.Get(e.JobID)
			_ = r.Stats()
			err := r.Audit()
			var enqErr error
			if e.Kind == leaserouter.EventCompleted && e.JobID == "a" {
				enqErr = r.Enqueue("follow-up", "")
			}
			mu.Lock()
			defer mu.Unlock()
			seen++
			errs = append(errs, err, enqErr)
		}
		r = setup(t, leaserouter.Options{OnEvent: onEvent})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, acquire(t, r, "w").Complete())
		synctest.Wait()
		require.Equal(t, leaserouter.StatePending, get(t, r, "follow-up").State)
		require.NoError(t, r.Close(context.Background()))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 4, seen, "enqueued, lease_acquired, completed, enqueued")
		require.NoError(t, errors.Join(errs...))
	})
}

func TestCloseDeliversEveryEventFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var delivered atomic.Int64
		slow := func(leaserouter.Event) {
			time.Sleep(time.Second) // a slow hook delays delivery, not transitions
			delivered.Add(1)
		}
		r := setup(t, leaserouter.Options{OnEvent: slow})
		for i := range 3 {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
			require.NoError(t, acquire(t, r, "w").Complete())
		}
		// Transitions made by other goroutines, their events still in delivery
		// (the hook is asleep) when Close is called.
		enqueued := make(chan error, 2)
		for _, id := range []string{"x", "y"} {
			go func() { enqueued <- r.Enqueue(id, "") }()
		}
		synctest.Wait()
		require.Less(t, delivered.Load(), int64(11))
		require.NoError(t, r.Close(context.Background()))
		require.Equal(t, int64(11), delivered.Load(), "every event delivered before Close returns")
		for range 2 {
			require.NoError(t, <-enqueued)
		}
	})
}

func TestLoggerOneRecordPerEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &logRecorder{}
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Logger: slog.New(h), OnEvent: rec.record,
			Backoff: noBackoff})
		require.NoError(t, r.Enqueue("a", ""))
		require.ErrorIs(t, r.Enqueue("a", ""), leaserouter.ErrDuplicate)
		l := acquire(t, r, "w")
		require.NoError(t, l.Heartbeat(nil))
		require.NoError(t, l.Fail(errors.New("boom")))
		requireLost(t, l.Complete(), l.Token, l.Token)
		acquire(t, r, "w")
		sleep(ld)
		require.NoError(t, r.Close(context.Background()))

		msgs := h.messages()
		require.Equal(t, kindNames(rec.all()), msgs)
		require.Equal(t, []string{"enqueued", "duplicate", "lease_acquired", "lease_extended", "failed",
			"retry_scheduled", "stale_rejected", "lease_acquired", "lease_expired"}, msgs)

		// A record names its job.
		h.mu.Lock()
		defer h.mu.Unlock()
		found := false
		h.recs[0].Attrs(func(a slog.Attr) bool {
			found = found || a.Value.String() == "a"
			return !found
		})
		require.True(t, found, "the enqueued record carries the job ID")
	})
}

func TestOnEventPanicIsRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var delivered atomic.Int64
		onEvent := func(e leaserouter.Event) {
			if delivered.Add(1) == 1 {
				panic("bad hook")
			}
		}
		r := setup(t, leaserouter.Options{OnEvent: onEvent, Logger: slog.New(&logRecorder{})})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, acquire(t, r, "w").Complete())
		require.NoError(t, r.Close(context.Background()))
		require.Equal(t, int64(3), delivered.Load(), "later events are still delivered")
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "a").State)
	})
}

func TestEventDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{
			LeaseDuration: ld, OnEvent: rec.record,
			Backoff: func(int) time.Duration { return 7 * time.Second },
		})
		type want struct {
			kind     leaserouter.EventKind
			wait     time.Duration
			requeued bool
			held     time.Duration
		}
		var wants []want
		next := 0 // events of "a" checked so far
		check := func(add ...want) {
			t.Helper()
			synctest.Wait()
			wants = append(wants, add...)
			evs := rec.of("a")
			for _, e := range evs[next:] {
				if e.Kind == leaserouter.EventEnqueued || e.Kind == leaserouter.EventRetryScheduled {
					require.Zero(t, e.Wait+e.Held, "%v", e.Kind)
					continue
				}
				w := wants[0]
				wants = wants[1:]
				require.Equal(t, w.kind, e.Kind)
				require.Equal(t, w.wait, e.Wait, "Wait of %v", e.Kind)
				require.Equal(t, w.requeued, e.Requeued, "Requeued of %v", e.Kind)
				require.Equal(t, w.held, e.Held, "Held of %v", e.Kind)
			}
			next = len(evs)
			require.Empty(t, wants, "events still to come")
		}
		acq := leaserouter.EventLeaseAcquired

		require.NoError(t, r.Enqueue("a", ""))
		sleep(2 * time.Second)
		l := acquire(t, r, "w")
		check(want{kind: acq, wait: 2 * time.Second})

		sleep(3 * time.Second)
		require.NoError(t, l.Heartbeat(nil))
		check(want{kind: leaserouter.EventLeaseExtended})
		sleep(ld) // expires ld after the heartbeat
		check(want{kind: leaserouter.EventLeaseExpired, held: 3*time.Second + ld})

		sleep(4 * time.Second)
		l = acquire(t, r, "w")
		check(want{kind: acq, wait: 4 * time.Second, requeued: true})

		sleep(time.Second)
		require.NoError(t, l.Release())
		l = acquire(t, r, "w")
		check(want{kind: leaserouter.EventReleased, held: time.Second}, want{kind: acq})

		sleep(2 * time.Second)
		require.NoError(t, l.Fail(errors.New("boom")))
		check(want{kind: leaserouter.EventFailed, held: 2 * time.Second})
		sleep(7*time.Second + time.Second) // ready at the run-at, leased a second later
		acquire(t, r, "w")
		check(want{kind: acq, wait: time.Second})

		sleep(5 * time.Second)
		require.NoError(t, r.Cancel("a"))
		check(want{kind: leaserouter.EventCanceled, held: 5 * time.Second})

		// A completion, and a revocation by Close.
		require.NoError(t, r.Enqueue("b", ""))
		lb := acquire(t, r, "w")
		sleep(6 * time.Second)
		require.NoError(t, lb.Complete())
		require.NoError(t, r.Enqueue("c", ""))
		acquire(t, r, "w")
		sleep(9 * time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, r.Close(ctx), context.Canceled)
		synctest.Wait() // Close cut short did not wait for delivery
		require.Equal(t, 6*time.Second, rec.last(t, "b").Held)
		last := rec.last(t, "c")
		require.Equal(t, leaserouter.EventReleased, last.Kind)
		require.ErrorIs(t, last.Err, leaserouter.ErrClosed)
		require.Equal(t, 9*time.Second, last.Held)
	})
}

// TestBackoffPanicReportedBeforeRefusal: the report of a Backoff panic is
// logged before what the refused Fail emits, in the order of the calls.
func TestBackoffPanicReportedBeforeRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &logRecorder{}
		r := setup(t, leaserouter.Options{Logger: slog.New(h), Backoff: func(int) time.Duration { panic("bad backoff") }})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NoError(t, r.Cancel("a"))
		require.ErrorIs(t, l.Fail(errors.New("late")), leaserouter.ErrLeaseLost)
		require.NoError(t, r.Close(context.Background()))
		require.Equal(t, []string{"enqueued", "lease_acquired", "canceled",
			"leaserouter: Backoff(1) panicked: bad backoff; used DefaultBackoff", "stale_rejected"}, h.messages())
	})
}

// TestEventLog: Event.Log writes the record a Router's Logger gets.
func TestEventLog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	leaserouter.Event{Kind: leaserouter.EventDead, Time: at, JobID: "j", WorkerID: "w", Token: 7, Attempt: 2, Err: errors.New("boom")}.Log(l)
	require.Equal(t, "time=2026-01-02T03:04:05.000Z level=WARN msg=dead event=dead job_id=j token=7 attempt=2 worker_id=w err=boom\n", buf.String())
	leaserouter.Event{Kind: leaserouter.EventCompleted}.Log(nil) // a nil Logger writes nothing
}
