package pgrouter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestClaimDuringClose: a claim whose round trip is still going when
// Close runs (here: stalled on the token sequence) hands its leases back
// and returns ErrClosed, instead of granting a lease nobody will revoke.
func TestClaimDuringClose(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	stall, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = stall.Exec(ctx, "ALTER SEQUENCE leaserouter_token CACHE 1") // nextval waits for it
	require.NoError(t, err)
	claimed := make(chan error, 1)
	go func() {
		_, err := r.TryAcquire(ctx, "w")
		claimed <- err
	}()
	eventually(t, 10*time.Second, "claim waiting on the sequence", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%nextval%'`).Scan(&n))
		return n > 0
	})
	require.NoError(t, r.Close(ctx), "no lease held yet")
	require.NoError(t, stall.Rollback(ctx))
	require.ErrorIs(t, <-claimed, leaserouter.ErrClosed)
	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StatePending, j.State, "handed back")
	require.Zero(t, j.Attempt, "the lease handed back is no attempt")
}

// TestUndecodablePayload: a job whose payload this Router cannot decode
// fails its attempt; the other jobs of the batch are returned, their
// attempts untouched.
func TestUndecodablePayload(t *testing.T) {
	ints, db := newRouter[int](t, pgrouter.Options{MaxAttempts: 1})
	strs := routerOn[string](t, db, pgrouter.Options{MaxAttempts: 1})
	ctx := t.Context()
	require.NoError(t, ints.Enqueue(ctx, "good1", 1))
	require.NoError(t, strs.Enqueue(ctx, "bad", "not an int"))
	require.NoError(t, ints.Enqueue(ctx, "good2", 2))
	ls, err := ints.TryAcquireMany(ctx, "w", 10)
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, "good1", ls[0].JobID)
	require.Equal(t, "good2", ls[1].JobID)
	j, _, err := ints.Get(ctx, "good2")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateLeased, j.State)
	js, _, err := strs.Get(ctx, "bad")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateFailed, js.State, "its one attempt failed")
	require.Contains(t, js.LastError, "does not decode")
}

// TestOrder: higher priority first, then ready time, then enqueue order;
// a batch's tokens increase in the order of its leases.
func TestOrder(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	_, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[int]{
		{ID: "low", Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(-1)}},
		{ID: "first"}, {ID: "second"},
		{ID: "high", Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(5)}},
		{ID: "third"},
	})
	require.NoError(t, err)
	ls, err := r.TryAcquireMany(ctx, "w", 10)
	require.NoError(t, err)
	var got []string
	for i, l := range ls {
		got = append(got, l.JobID)
		if i > 0 {
			require.Greater(t, l.Token, ls[i-1].Token)
		}
	}
	require.Equal(t, []string{"high", "first", "second", "third", "low"}, got)
}
