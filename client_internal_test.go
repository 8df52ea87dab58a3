package leaserouter

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClientDispatchAllocatesNothing: a Client runs a job's first
// attempt on its kind's handler, with a typed view of the queue's lease,
// without allocating (the view comes with the payload, from Enqueue), so
// that a Client drains as fast as a Router's Run (BenchmarkClientDrain).
func TestClientDispatchAllocatesNothing(t *testing.T) {
	c, err := NewClient(ClientOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { stopNow(c) })
	var seen int
	k, err := Register(c, "k", func(_ context.Context, l *Lease[int]) error {
		seen += l.Payload
		return nil
	})
	require.NoError(t, err)
	const runs = 100
	ctx := context.Background()
	for i := range runs + 1 { // AllocsPerRun runs once more, to warm up
		require.NoError(t, k.Enqueue(ctx, strconv.Itoa(i), 1))
	}
	r := c.Queue(DefaultQueue).r
	leases, err := r.TryAcquireMany("w", runs+1)
	require.NoError(t, err)
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		_ = c.dispatch(ctx, leases[next])
		next++
	})
	require.Zero(t, allocs, "allocations per dispatch")
	require.Equal(t, runs+1, seen, "each handler ran with its payload")
	for _, l := range leases {
		require.NoError(t, l.Complete())
	}
}

// TestClientDispatchViewIsFreshAfterAnAttempt: a job's later attempt
// gets a lease of its own, so a handler of an earlier attempt that kept
// its lease still sees that lease (and is refused on it).
func TestClientDispatchViewIsFreshAfterAnAttempt(t *testing.T) {
	c, err := NewClient(ClientOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { stopNow(c) })
	var kept []*Lease[string]
	k, err := Register(c, "k", func(_ context.Context, l *Lease[string]) error {
		kept = append(kept, l)
		return nil
	})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, k.Enqueue(ctx, "x", "p"))
	r := c.Queue(DefaultQueue).r
	l1, err := r.TryAcquire("w")
	require.NoError(t, err)
	require.NoError(t, c.dispatch(ctx, l1))
	require.NoError(t, l1.Release())
	l2, err := r.TryAcquire("w")
	require.NoError(t, err)
	require.NoError(t, c.dispatch(ctx, l2))
	require.Len(t, kept, 2)
	require.NotSame(t, kept[0], kept[1])
	require.Equal(t, 1, kept[0].Attempt)
	require.Equal(t, 2, kept[1].Attempt)
	require.Equal(t, "p", kept[1].Payload)
	require.ErrorIs(t, kept[0].Complete(), ErrLeaseLost, "the first attempt's lease, refused")
	require.NoError(t, kept[1].Complete(), "through the view")
	j, ok := c.Queue(DefaultQueue).Get("x")
	require.True(t, ok)
	require.Equal(t, StateSucceeded, j.State)
	require.Equal(t, "p", j.Payload, "the admin calls show the payload")
}

// stopNow stops c, revoking at once what is still held (a test that
// failed may hold leases).
func stopNow(c *Client) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.Stop(ctx)
}

// TestClientConcurrentAttemptsSeeTheirOwnLease: a job's first attempt
// may still be on its way into its handler when its lease is lost and a
// second attempt starts (a lease of a batch canceled and retried while
// its worker runs the one before it, or an expiry while its worker is
// descheduled): nothing orders the two dispatches. Each handler must get
// a lease of its own, with its own Attempt and Token (fencing), and the
// two dispatches must not race on the job's payload (run with -race).
func TestClientConcurrentAttemptsSeeTheirOwnLease(t *testing.T) {
	c, err := NewClient(ClientOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { stopNow(c) })
	type seen struct {
		attempt int
		token   Token
		payload string
		l       *Lease[string]
	}
	got := make(chan seen, 2)
	k, err := Register(c, "k", func(_ context.Context, l *Lease[string]) error {
		got <- seen{l.Attempt, l.Token, l.Payload, l}
		return nil
	})
	require.NoError(t, err)
	ctx := context.Background()
	q := c.Queue(DefaultQueue)
	for i := range 50 {
		id := "x" + strconv.Itoa(i)
		require.NoError(t, k.Enqueue(ctx, id, "p"+id))
		l1, err := q.r.TryAcquire("w1")
		require.NoError(t, err)
		// Lost before its worker dispatched it; the job runs again.
		require.NoError(t, q.Cancel(id))
		require.NoError(t, q.Retry(id))
		l2, err := q.r.TryAcquire("w2")
		require.NoError(t, err)
		require.Equal(t, id, l2.JobID)
		var wg sync.WaitGroup
		for _, l := range []*Lease[any]{l1, l2} {
			wg.Go(func() { _ = c.dispatch(ctx, l) })
		}
		wg.Wait()
		a, b := <-got, <-got
		if a.token > b.token { // tokens increase: a is the first attempt's
			a, b = b, a
		}
		require.NotSame(t, a.l, b.l, "each attempt its own lease")
		require.Equal(t, []any{l1.Attempt, l1.Token, "p" + id}, []any{a.attempt, a.token, a.payload}, "the first attempt's handler")
		require.Equal(t, []any{l2.Attempt, l2.Token, "p" + id}, []any{b.attempt, b.token, b.payload}, "the second attempt's handler")
		require.NoError(t, l2.Complete())
	}
}
