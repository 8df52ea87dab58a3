package pgrouter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestAcquireWokenForScheduledJob: an Acquire already waiting takes a
// job scheduled after it began waiting at the job's run-at, not at its
// next poll: it is blocked before the job exists (its Router listening),
// PollInterval is an hour, and the enqueue's notification comes before
// the run-at, so only the timer at the queue's next due instant can wake
// it in time.
func TestAcquireWokenForScheduledJob(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{PollInterval: time.Hour})
	ctx := t.Context()
	got := make(chan error, 1)
	go func() {
		_, err := r.Acquire(ctx, "w")
		got <- err
	}()
	eventually(t, 10*time.Second, "listening, the Acquire blocked", func() bool {
		return pgrouter.Listening(r) && pgrouter.Parked(r) == 1
	})
	require.NoError(t, r.Enqueue(ctx, "later", 1, leaserouter.WithDelay(200*time.Millisecond)))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Acquire did not take the scheduled job within 10s of its run-at")
	}
}

// TestNotifyOnScheduled: enqueueing a scheduled job, and a retry
// scheduled by Fail, notify the queue's listeners (their waiters take the
// new due instant for their timers).
func TestNotifyOnScheduled(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{Backoff: func(int) time.Duration { return time.Hour }})
	ctx := t.Context()
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN leaserouter")
	require.NoError(t, err)
	expect := func(what string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(wctx)
		require.NoError(t, err, what)
		require.Equal(t, pgrouter.DefaultQueue, n.Payload)
	}
	require.NoError(t, r.Enqueue(ctx, "later", 1, leaserouter.WithDelay(time.Hour)))
	expect("scheduled enqueue")
	require.NoError(t, r.Enqueue(ctx, "now", 1))
	expect("pending enqueue")
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(ctx, errors.New("retry in an hour")))
	expect("scheduled retry")
}

// TestAcquireWokenAcrossRouters: an Acquire blocked in one Router is woken
// by an Enqueue through another (another process, as far as the database
// knows), by NOTIFY: the Acquire is blocked before the job exists (its
// Router listening, so the listener's one wake-up of a new connection is
// behind it), and PollInterval is an hour, so nothing but the
// notification can wake it within the test's bound.
func TestAcquireWokenAcrossRouters(t *testing.T) {
	a, db := newRouter[int](t, pgrouter.Options{PollInterval: time.Hour})
	b := routerOn[int](t, db, pgrouter.Options{PollInterval: time.Hour})
	ctx := t.Context()
	got := make(chan *pgrouter.Lease[int], 1)
	go func() {
		l, err := a.Acquire(ctx, "w")
		if err == nil {
			got <- l
		}
		close(got)
	}()
	eventually(t, 10*time.Second, "a listening, its Acquire blocked", func() bool {
		return pgrouter.Listening(a) && pgrouter.Parked(a) == 1
	})
	require.NoError(t, b.Enqueue(ctx, "j", 1))
	select {
	case l := <-got:
		require.NotNil(t, l)
		require.Equal(t, "j", l.JobID)
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked Acquire was not woken by the other Router's NOTIFY within 10s")
	}
}
