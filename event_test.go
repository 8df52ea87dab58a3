package leaserouter_test

// Tests of events (event.go): kinds, the story one job's events tell,
// durations, the log form.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/routertest"
)

func TestEventKindStrings(t *testing.T) {
	want := []string{"enqueued", "duplicate", "lease_acquired", "lease_extended",
		"lease_expired", "completed", "failed", "retry_scheduled", "dead",
		"stale_rejected", "released", "canceled", "purged", "retried", "snoozed"}
	kinds := []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventDuplicate,
		leaserouter.EventLeaseAcquired, leaserouter.EventLeaseExtended, leaserouter.EventLeaseExpired,
		leaserouter.EventCompleted, leaserouter.EventFailed, leaserouter.EventRetryScheduled,
		leaserouter.EventDead, leaserouter.EventStaleRejected, leaserouter.EventReleased,
		leaserouter.EventCanceled, leaserouter.EventPurged, leaserouter.EventRetried, leaserouter.EventSnoozed}
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
		h := &routertest.LogRecorder{}
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

		msgs := h.Messages()
		require.Equal(t, kindNames(rec.all()), msgs)
		require.Equal(t, []string{"enqueued", "duplicate", "lease_acquired", "lease_extended", "failed",
			"retry_scheduled", "stale_rejected", "lease_acquired", "lease_expired"}, msgs)

		// A record names its job.
		found := false
		h.Records()[0].Attrs(func(a slog.Attr) bool {
			found = found || a.Value.String() == "a"
			return !found
		})
		require.True(t, found, "the enqueued record carries the job ID")
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
		h := &routertest.LogRecorder{}
		r := setup(t, leaserouter.Options{Logger: slog.New(h), Backoff: func(int) time.Duration { panic("bad backoff") }})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NoError(t, r.Cancel("a"))
		require.ErrorIs(t, l.Fail(errors.New("late")), leaserouter.ErrLeaseLost)
		require.NoError(t, r.Close(context.Background()))
		require.Equal(t, []string{"enqueued", "lease_acquired", "canceled",
			"leaserouter: Backoff(1) panicked: bad backoff; used DefaultBackoff", "stale_rejected"}, h.Messages())
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
