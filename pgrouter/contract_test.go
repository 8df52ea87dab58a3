package pgrouter_test

// Rules pgrouter shares with the core through internal/contract, each
// tested here and, under the same name, in the core's contract_test.go,
// so the two backends give one answer (the conformance suite,
// internal/routertest, takes them as rows).

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// eventBacklog is DESIGN's bound, written out: a test using the package's
// own constant would follow it if it changed.
const eventBacklog = 16384

// TestEventBacklogIs16384: with the hook stuck, producers of new work go
// on until 16384 events are undelivered (the one in the hook and the rest
// of its batch included), and wait from there.
func TestEventBacklogIs16384(t *testing.T) {
	open := make(chan struct{})
	r, _ := newRouter[int](t, pgrouter.Options{OnEvent: func(leaserouter.Event) { <-open }})
	defer close(open) // before the cleanup's Close, which waits for delivery
	enqueueJobs(t, r, "j", eventBacklog-1)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Enqueue(ctx, "last", 0), "the 16384th event has room")
	short, cancelShort := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancelShort()
	require.ErrorIs(t, r.Enqueue(short, "over", 0), context.DeadlineExceeded, "the 16385th waits for room")
	_, found, err := r.Get(t.Context(), "over")
	require.NoError(t, err)
	require.False(t, found, "a producer held for room has not enqueued")
}

// TestHandlerPanicLastError: a handler's panic fails the attempt with
// LastError "panic: <value>", a blank line and the stack, the same text
// on every backend.
func TestHandlerPanicLastError(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{MaxAttempts: 1})
	require.NoError(t, r.Enqueue(t.Context(), "p", 0))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(context.Context, *pgrouter.Lease[int]) error { panic("boom") })
	}()
	var j leaserouter.Job[int]
	eventually(t, 10*time.Second, "the job is dead", func() bool {
		var ok bool
		var err error
		j, ok, err = r.Get(t.Context(), "p")
		return err == nil && ok && j.State == leaserouter.StateFailed
	})
	cancel()
	require.NoError(t, <-done)
	require.True(t, strings.HasPrefix(j.LastError, "panic: boom\n\n"), "LastError %q", j.LastError)
	require.Contains(t, j.LastError, "goroutine ", "the stack follows")
}

// TestBatchAfterCutLeasesOne: after a Run batch that was cut (a heartbeat
// round came while a job ran, and the jobs waiting their turn were handed
// back), the worker leases one job at a time again, however short the
// batch ran: here the round comes early in the batch, which then ends at
// once (pgrouter's rounds are every HeartbeatInterval from Run's start,
// not from the batch's).
func TestBatchAfterCutLeasesOne(t *testing.T) {
	const interval = 4 * time.Second
	var r *pgrouter.Router[int]
	var aToken atomic.Uint64
	aBeat := make(chan struct{})
	var once sync.Once
	r, _ = newRouter[int](t, pgrouter.Options{LeaseDuration: 5 * interval, OnEvent: func(e leaserouter.Event) {
		if e.Kind == leaserouter.EventLeaseExtended && uint64(e.Token) == aToken.Load() {
			once.Do(func() { close(aBeat) })
		}
	}})
	leasedAtB := make(chan int, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	start := time.Now() // the rounds come at start + k*interval
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: interval, Batch: 8},
			func(ctx context.Context, l *pgrouter.Lease[int]) error {
				switch l.JobID {
				case "a": // runs until the first round has cut its batch and extended it
					aToken.Store(uint64(l.Token))
					select {
					case <-aBeat:
					case <-time.After(3 * interval):
					}
				case "b":
					if s, err := r.Stats(ctx); err == nil {
						select {
						case leasedAtB <- s.Leased:
						default:
						}
					}
				}
				return nil
			})
	}()
	// Just before the first round: q1 runs alone (quick: the size doubles
	// to 2), then [a, b], which the round cuts a moment later.
	time.Sleep(time.Until(start.Add(interval * 9 / 10)))
	specs := []leaserouter.JobSpec[int]{}
	for i, id := range []string{"q1", "a", "b", "c", "d", "e"} {
		specs = append(specs, leaserouter.JobSpec[int]{ID: id, Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(100 - i)}})
	}
	_, err := r.EnqueueMany(t.Context(), specs)
	require.NoError(t, err)
	var n int
	select {
	case n = <-leasedAtB:
	case <-time.After(4 * interval):
		t.Fatal("b never ran")
	}
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 1, n, "jobs leased when b, first of the batch after the cut one, starts")
}

// TestInvalidOptionsMessages: the options every backend has are refused
// with the core's messages (the same cases as the core's test), wrapping
// ErrInvalidOptions; pgrouter's one declared difference, the floor on
// LeaseDuration, says so in the same form.
func TestInvalidOptionsMessages(t *testing.T) {
	db := pgtest.New(t)
	cases := []struct {
		opts pgrouter.Options
		want string
	}{
		{pgrouter.Options{LeaseDuration: -time.Second}, "leaserouter: invalid options: LeaseDuration is -1s, must be > 0 (or 0 for the default 30s)"},
		{pgrouter.Options{MaxAttempts: -1}, "leaserouter: invalid options: MaxAttempts is -1, must be >= 1 (or 0 for the default 5)"},
		{pgrouter.Options{MaxAttempts: 1 << 31}, "leaserouter: invalid options: MaxAttempts is 2147483648, must be <= 2147483647"},
		{pgrouter.Options{TokenFloor: 1 << 63}, "leaserouter: invalid options: TokenFloor is 9223372036854775808, must be < 9223372036854775807 so tokens fit in an int64"},
		{pgrouter.Options{LeaseDuration: time.Microsecond}, "leaserouter: invalid options: LeaseDuration is 1µs, must be >= 1ms on this backend (or 0 for the default 30s)"},
		{pgrouter.Options{PollInterval: -time.Second}, "leaserouter: invalid options: PollInterval is -1s, must be >= 0 (or 0 for the default 1s)"},
	}
	for _, c := range cases {
		_, err := pgrouter.New[int](t.Context(), db, c.opts)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, c.want)
		require.EqualError(t, err, c.want)
	}
	routerOn[int](t, db, pgrouter.Options{LeaseDuration: pgrouter.MinLeaseDuration}) // the floor itself is valid
}

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

func (h *recorder) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *recorder) WithGroup(string) slog.Handler { return h }

// messages returns the records' messages; errors, those at level Error,
// each with its job_id.
func (h *recorder) messages() (all, errors []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		all = append(all, r.Message)
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
		errors = append(errors, r.Message+" job_id="+job)
	}
	return all, errors
}

// TestPanickingBackoffCountedAndReported: a Backoff that panics is
// counted in Stats.CallbackPanics and reported at level Error through the
// Logger, and the attempt is retried after DefaultBackoff.
func TestPanickingBackoffCountedAndReported(t *testing.T) {
	rec := &recorder{}
	r, _ := newRouter[int](t, pgrouter.Options{Logger: slog.New(rec),
		Backoff: func(int) time.Duration { panic("boom") }})
	require.NoError(t, leaseOn(t, r, "j").Fail(t.Context(), errors.New("failed")))
	j, _, err := r.Get(t.Context(), "j")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateScheduled, j.State, "retried after DefaultBackoff")
	s, err := r.Stats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, s.CallbackPanics)
	want := []string{"leaserouter: Backoff(1) panicked: boom; used DefaultBackoff job_id=j"}
	eventually(t, 10*time.Second, "the report", func() bool {
		all, _ := rec.messages()
		return slices.Contains(all, "retry_scheduled")
	})
	_, reports := rec.messages()
	require.Equal(t, want, reports)
}

// TestHookPanicReportedThroughLogger: a panic in OnEvent is counted and
// reported at level Error through the configured Logger (not
// slog.Default()), and delivery goes on: the Logger still gets the event.
func TestHookPanicReportedThroughLogger(t *testing.T) {
	rec := &recorder{}
	r, _ := newRouter[int](t, pgrouter.Options{Logger: slog.New(rec),
		OnEvent: func(e leaserouter.Event) {
			if e.Kind == leaserouter.EventEnqueued {
				panic("boom")
			}
		}})
	require.NoError(t, r.Enqueue(t.Context(), "j", 0))
	eventually(t, 10*time.Second, "the event reaches the Logger", func() bool {
		all, _ := rec.messages()
		return slices.Contains(all, "enqueued")
	})
	_, reports := rec.messages()
	require.Equal(t, []string{"leaserouter: OnEvent panicked on enqueued: boom job_id=j"}, reports)
	s, err := r.Stats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, s.CallbackPanics)
}

// TestHookGoexitSurvived: an OnEvent that calls runtime.Goexit (as
// t.FailNow does) ends no delivery: it counts as a panic of the hook,
// reported through the Logger, the Logger still gets that event, and
// later events are delivered.
func TestHookGoexitSurvived(t *testing.T) {
	rec := &recorder{}
	var mu sync.Mutex
	var seen []string
	r, _ := newRouter[int](t, pgrouter.Options{Logger: slog.New(rec),
		OnEvent: func(e leaserouter.Event) {
			mu.Lock()
			seen = append(seen, e.JobID)
			mu.Unlock()
			if e.JobID == "a" {
				runtime.Goexit()
			}
		}})
	require.NoError(t, r.Enqueue(t.Context(), "a", 0))
	require.NoError(t, r.Enqueue(t.Context(), "b", 0))
	enqueued := func() int {
		all, _ := rec.messages()
		n := 0
		for _, m := range all {
			if m == "enqueued" {
				n++
			}
		}
		return n
	}
	eventually(t, 10*time.Second, "both events reach the Logger", func() bool { return enqueued() == 2 })
	mu.Lock()
	require.Equal(t, []string{"a", "b"}, seen)
	mu.Unlock()
	_, reports := rec.messages()
	require.Equal(t, []string{"leaserouter: OnEvent called runtime.Goexit on enqueued job_id=a"}, reports)
	s, err := r.Stats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, s.CallbackPanics)
	require.NoError(t, r.Close(t.Context()))
}

// TestEventHeldOnLeaseEnd: the events that end a lease carry Held, how
// long it was held from its grant, on the database's clock:
// lease_expired to the expiry instant (its Time; the grant instant is in
// the row, so whichever process settles it knows), canceled (of a leased
// job) to the cancel; and the completed event Run emits for a lease its
// handler completed with CompleteTx has the database's instant of the
// completion as its Time (the row's updated_at), not the moment Run saw
// the commit.
func TestEventHeldOnLeaseEnd(t *testing.T) {
	const ld = time.Second
	var mu sync.Mutex
	got := map[leaserouter.EventKind]leaserouter.Event{}
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: ld, MaxAttempts: 1, OnEvent: func(e leaserouter.Event) {
		mu.Lock()
		got[e.Kind] = e
		mu.Unlock()
	}})
	event := func(k leaserouter.EventKind) leaserouter.Event {
		eventually(t, 10*time.Second, k.String(), func() bool {
			mu.Lock()
			defer mu.Unlock()
			_, ok := got[k]
			return ok
		})
		mu.Lock()
		defer mu.Unlock()
		return got[k]
	}
	l := leaseOn(t, r, "expires")
	awaitDBTime(t, db, l.Expiry())
	_, err := r.TryAcquire(t.Context(), "w") // settles the expiry
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	e := event(leaserouter.EventLeaseExpired)
	require.True(t, e.Time.Equal(l.Expiry()), "lease_expired at the expiry instant")
	require.Equal(t, ld, e.Held, "lease_expired: held from grant to expiry")

	l = leaseOn(t, r, "canceled")
	granted := l.Expiry().Add(-ld)
	require.NoError(t, r.Cancel(t.Context(), "canceled"))
	e = event(leaserouter.EventCanceled)
	require.Positive(t, e.Held)
	require.Equal(t, e.Time.Sub(granted), e.Held, "canceled: held from grant to the cancel")

	require.NoError(t, r.Enqueue(t.Context(), "completed", 0))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	txErr := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(ctx context.Context, l *pgrouter.Lease[int]) error {
			tx, err := db.Begin(ctx)
			if err == nil {
				err = l.CompleteTx(ctx, tx)
				if err == nil {
					err = tx.Commit(ctx)
				} else {
					_ = tx.Rollback(ctx)
				}
			}
			txErr <- err
			time.Sleep(200 * time.Millisecond) // Run sees the commit after this
			return nil
		})
	}()
	require.NoError(t, <-txErr)
	e = event(leaserouter.EventCompleted)
	cancel()
	require.NoError(t, <-done)
	j, _, err := r.Get(t.Context(), "completed")
	require.NoError(t, err)
	require.True(t, e.Time.Equal(j.UpdatedAt), "completed at %v, the row says %v", e.Time, j.UpdatedAt)
}

// TestKeepAliveNilLeaseInvalidOptions: KeepAlive of a nil or zero lease
// returns a context already canceled, its cause wrapping
// ErrInvalidOptions with the core's message; its cancel func is safe.
func TestKeepAliveNilLeaseInvalidOptions(t *testing.T) {
	for _, l := range []*pgrouter.Lease[int]{nil, {}} {
		ctx, cancel := pgrouter.KeepAlive(t.Context(), l, 0)
		require.Error(t, ctx.Err())
		require.ErrorIs(t, context.Cause(ctx), leaserouter.ErrInvalidOptions)
		require.EqualError(t, context.Cause(ctx), "leaserouter: KeepAlive of a nil *Lease: leaserouter: invalid options")
		cancel()
	}
}

// TestKeepAliveIntervalFloor: a positive interval below
// MinHeartbeatInterval is raised to it (a quarter of LeaseDuration if
// that is shorter), as in the core; <= 0 means LeaseDuration/3.
func TestKeepAliveIntervalFloor(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{LeaseDuration: 3 * time.Second})
	l := leaseOn(t, r, "a")
	_, stop1 := pgrouter.KeepAlive(t.Context(), l, time.Nanosecond)
	defer stop1()
	_, stop2 := pgrouter.KeepAlive(t.Context(), l, 0)
	defer stop2()
	require.Equal(t, []time.Duration{leaserouter.MinHeartbeatInterval, time.Second}, pgrouter.KeptIntervals(l))

	r, _ = newRouter[int](t, pgrouter.Options{LeaseDuration: 2 * time.Millisecond})
	l = leaseOn(t, r, "b")
	_, stop3 := pgrouter.KeepAlive(t.Context(), l, time.Nanosecond)
	defer stop3()
	require.Equal(t, []time.Duration{500 * time.Microsecond}, pgrouter.KeptIntervals(l), "a quarter of a short lease")
}

// TestKeepAliveSecondCoexists: KeepAlive called twice for one lease keeps
// it alive for both; canceling one leaves the other's context live and
// the lease kept.
func TestKeepAliveSecondCoexists(t *testing.T) {
	const ld = time.Second
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: ld})
	l := leaseOn(t, r, "a")
	first, cancel1 := pgrouter.KeepAlive(t.Context(), l, ld/5)
	defer cancel1()
	second, cancel2 := pgrouter.KeepAlive(t.Context(), l, ld/5)
	require.NoError(t, first.Err(), "a second KeepAlive does not cancel the first")
	require.NoError(t, second.Err())
	cancel2()
	require.ErrorIs(t, context.Cause(second), context.Canceled)
	awaitDBTime(t, db, time.Now().Add(3*ld)) // three lease durations: kept by the first alone
	require.NoError(t, first.Err())
	require.NoError(t, l.Complete(t.Context()))
}

// TestKeepAliveCancelWaitsForHeartbeatInFlight: KeepAlive's cancel func
// returns only after a heartbeat in flight with its lease has returned,
// so no heartbeat of it lands after cancel (here the heartbeat waits for
// a table lock another transaction holds).
func TestKeepAliveCancelWaitsForHeartbeatInFlight(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 10 * time.Second, PollInterval: time.Hour})
	l := leaseOn(t, r, "a")
	tx, err := db.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), "LOCK TABLE leaserouter_jobs IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	kctx, cancel := pgrouter.KeepAlive(t.Context(), l, 50*time.Millisecond)
	eventually(t, 10*time.Second, "a heartbeat waits for the table", func() bool {
		var n int
		require.NoError(t, db.QueryRow(t.Context(),
			"SELECT count(*) FROM pg_locks WHERE relation = 'leaserouter_jobs'::regclass AND NOT granted").Scan(&n))
		return n > 0
	})
	canceled := make(chan struct{})
	go func() {
		cancel()
		close(canceled)
	}()
	select {
	case <-canceled:
		t.Fatal("cancel returned while a heartbeat of its lease was in flight")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Rollback(t.Context()))
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not return once the heartbeat did")
	}
	require.ErrorIs(t, context.Cause(kctx), context.Canceled)
	s, err := r.Stats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, s.Heartbeats, "the heartbeat in flight had landed when cancel returned")
}

// TestHandlerResultAfterStop: once Run's ctx is done, a handler that
// still returns nil completes its job, and one that returns an error
// releases it (pending again), not a failed attempt.
func TestHandlerResultAfterStop(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{Backoff: func(int) time.Duration { return time.Hour }})
	require.NoError(t, r.Enqueue(t.Context(), "ok", 0))
	require.NoError(t, r.Enqueue(t.Context(), "err", 0))
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{}, 2)
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 2, Batch: 1}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
			started <- struct{}{}
			<-hctx.Done()
			if l.JobID == "err" {
				return errors.New("stopped")
			}
			return nil
		})
	}()
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("both handlers did not start")
		}
	}
	cancel()
	require.NoError(t, <-done)
	state := func(id string) leaserouter.State {
		j, _, err := r.Get(t.Context(), id)
		require.NoError(t, err)
		return j.State
	}
	eventually(t, 10*time.Second, "both jobs settled", func() bool { return state("ok") != leaserouter.StateLeased && state("err") != leaserouter.StateLeased })
	require.Equal(t, leaserouter.StateSucceeded, state("ok"), "nil after the stop: completed")
	require.Equal(t, leaserouter.StatePending, state("err"), "an error after the stop: released")
}
