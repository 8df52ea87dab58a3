package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestAcquireWokenForScheduledJob: an Acquire already waiting takes a
// job scheduled after it began waiting at the job's run-at, not at its
// next poll.
func TestAcquireWokenForScheduledJob(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{PollInterval: time.Minute})
	ctx := t.Context()
	got := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := r.Acquire(actx, "w")
		got <- err
	}()
	// Enqueued until the waiter is listening and takes one.
	for i := 0; ; i++ {
		require.NoError(t, r.Enqueue(ctx, fmt.Sprint("j", i), i, leaserouter.WithDelay(200*time.Millisecond)))
		select {
		case err := <-got:
			require.NoError(t, err)
			return
		case <-time.After(2 * time.Second):
		}
		require.Less(t, i, 5, "the waiter never took a scheduled job before its poll")
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
