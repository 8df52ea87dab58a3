package pgrouter_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"log/slog"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestEvents: every transition this process makes is delivered, in
// order, with its lease's fields, to OnEvent and to the Logger; Close
// returns once all are delivered.
func TestEvents(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	var mu sync.Mutex
	var got []leaserouter.Event
	var logs bytes.Buffer
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{
		MaxAttempts: 2, Backoff: func(int) time.Duration { return 0 },
		OnEvent: func(e leaserouter.Event) {
			mu.Lock()
			got = append(got, e)
			mu.Unlock()
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	require.ErrorIs(t, r.Enqueue(ctx, "a", 1), leaserouter.ErrDuplicate)
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Heartbeat(ctx, nil))
	require.NoError(t, l.Complete(ctx))
	require.Error(t, l.Complete(ctx))
	require.NoError(t, r.Enqueue(ctx, "b", 2))
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(ctx, errors.New("boom")))
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx)) // its last attempt: dead
	require.NoError(t, r.Enqueue(ctx, "c", 3))
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, r.Cancel(ctx, "c"))
	require.NoError(t, r.Close(ctx))

	want := []leaserouter.EventKind{
		leaserouter.EventEnqueued, leaserouter.EventDuplicate,
		leaserouter.EventLeaseAcquired, leaserouter.EventLeaseExtended, leaserouter.EventCompleted, leaserouter.EventStaleRejected,
		leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired, leaserouter.EventFailed, leaserouter.EventRetryScheduled,
		leaserouter.EventLeaseAcquired, leaserouter.EventReleased, leaserouter.EventDead,
		leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired, leaserouter.EventCanceled,
	}
	mu.Lock()
	defer mu.Unlock()
	var kinds []leaserouter.EventKind
	for _, e := range got {
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, want, kinds)
	acq := got[2]
	require.Equal(t, "a", acq.JobID)
	require.Equal(t, "w", acq.WorkerID)
	require.Equal(t, 1, acq.Attempt)
	require.NotZero(t, acq.Token)
	require.WithinDuration(t, time.Now(), acq.Time, time.Minute)
	require.Equal(t, acq.Token, got[4].Token, "completed: the same lease")
	require.GreaterOrEqual(t, got[4].Held, time.Duration(0))
	require.EqualError(t, got[8].Err, "boom")
	require.Equal(t, 2, got[10].Attempt)
	require.Equal(t, l.Token, got[15].Token, "canceled while leased: the lease's token")
	require.Equal(t, len(want), strings.Count(logs.String(), "\n"), "one log record per event")
	require.Contains(t, logs.String(), "level=WARN msg=stale_rejected event=stale_rejected job_id=a")
}

// TestEventHookPanics: a panicking OnEvent is recovered and counted, and
// delivery goes on.
func TestEventHookPanics(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	var mu sync.Mutex
	n := 0
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{OnEvent: func(e leaserouter.Event) {
		mu.Lock()
		n++
		mu.Unlock()
		if e.JobID == "boom" {
			panic("hook")
		}
	}})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "boom", 1))
	require.NoError(t, r.Enqueue(ctx, "after", 1))
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, r.Close(cctx))
	mu.Lock()
	require.Equal(t, 2, n)
	mu.Unlock()
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.CallbackPanics)
}
