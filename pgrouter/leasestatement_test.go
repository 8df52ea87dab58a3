package pgrouter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestRefusalReasonAfterLockWait: an operation that waited for the row
// while another transaction completed the lease reports "completed".
func TestRefusalReasonAfterLockWait(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, l.CompleteTx(ctx, tx))
	hb := make(chan error, 1)
	go func() { hb <- l.Heartbeat(ctx, nil) }()
	select {
	case err := <-hb:
		t.Fatalf("Heartbeat did not wait for the row: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, <-hb, &lost)
	require.Equal(t, leaserouter.LostCompleted, lost.Reason)
}

// TestExpiryCheckedAtTheLock: an operation waiting for a row another
// transaction only locked (SELECT ... FOR UPDATE) past the lease's expiry
// is refused as expired: its clock is read with the lock held.
func TestExpiryCheckedAtTheLock(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 200 * time.Millisecond, PollInterval: time.Hour})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT FROM leaserouter_jobs WHERE id = 'a' FOR UPDATE")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- l.Complete(ctx) }()
	awaitDBTime(t, db, l.Expiry())
	require.NoError(t, tx.Rollback(ctx))
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, <-done, &lost)
	require.Equal(t, leaserouter.LostExpired, lost.Reason)
}

// eventsOf records a Router's events (Options.OnEvent), by job ID.
type eventsOf struct {
	mu   sync.Mutex
	kind map[string][]leaserouter.EventKind
}

func (e *eventsOf) on(ev leaserouter.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kind == nil {
		e.kind = map[string][]leaserouter.EventKind{}
	}
	e.kind[ev.JobID] = append(e.kind[ev.JobID], ev.Kind)
}

func (e *eventsOf) of(id string) []leaserouter.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kind[id]
}

// whileHeld returns kinds without the lease-extended events between a
// lease's grant and its end (Completed, Failed, Released): Run's
// heartbeats, which the scheduler can put before a completion (a
// stopping Run's round extends a lease whose handler has not returned
// yet). An extension anywhere else is kept, for the caller to refuse.
func whileHeld(kinds []leaserouter.EventKind) []leaserouter.EventKind {
	var out []leaserouter.EventKind
	held := false
	for _, k := range kinds {
		switch k {
		case leaserouter.EventLeaseAcquired:
			held = true
		case leaserouter.EventCompleted, leaserouter.EventFailed, leaserouter.EventReleased:
			held = false
		case leaserouter.EventLeaseExtended:
			if held {
				continue
			}
		}
		out = append(out, k)
	}
	return out
}

// At a Retention below zero, Run's completion deletes the job's row
// itself (no maintenance round runs here), reports it purged and counts
// it in Stats.Purged. Run's heartbeats of a lease before its completion
// (a stopping Run's round can come before the last handler returns) are
// the scheduler's, not what this test is about (whileHeld).
func TestRunCompletionAtNegativeRetentionDeletesTheRow(t *testing.T) {
	evs := &eventsOf{}
	r, db := newRouter[int](t, pgrouter.Options{Retention: -1, PollInterval: time.Hour, OnEvent: evs.on})
	ctx := t.Context()
	enqueueJobs(t, r, "j", 3)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var left atomic.Int32
	left.Store(3)
	require.NoError(t, r.Run(rctx, leaserouter.WorkerOptions{Workers: 1}, func(context.Context, *pgrouter.Lease[int]) error {
		if left.Add(-1) == 0 {
			cancel()
		}
		return nil
	}))
	require.NoError(t, pgrouter.AwaitBackground(ctx, r))
	var rows int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM leaserouter_jobs`).Scan(&rows))
	require.Zero(t, rows, "the completions deleted the rows")
	require.NoError(t, r.Close(ctx)) // every event delivered
	for i := range 3 {
		id := fmt.Sprint("j", i)
		require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired,
			leaserouter.EventCompleted, leaserouter.EventPurged}, whileHeld(evs.of(id)), id)
	}
	st, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Purged)
	require.Zero(t, st.StaleRejections)
}

// A completion that deleted the job's row (Retention < 0) and whose reply
// was lost is retried: the retry finds no row, and learns from the
// earlier statement's record that the lease completed. A lease whose row
// some other statement deleted is refused all the same.
func TestCompletionRetryFindsTheRowItsLostReplyDeleted(t *testing.T) {
	evs := &eventsOf{}
	r, db := newRouter[int](t, pgrouter.Options{Retention: -1, PollInterval: time.Hour, OnEvent: evs.on})
	ctx := t.Context()
	a, b := leaseOn(t, r, "a"), leaseOn(t, r, "b")
	sql, names := pgrouter.Statement("leases_end")
	lost := func(l *pgrouter.Lease[int], op int64) { // a completion that committed, its reply lost
		v := batchValues([]string{l.JobID}, []int64{int64(l.Token)})
		v["retention_us"], v["op"] = int64(0), op
		_, err := db.Exec(ctx, sql, bindPositional(names, v)...)
		require.NoError(t, err)
	}
	lost(a, 11)
	lost(b, 12)
	var rows int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM leaserouter_jobs`).Scan(&rows))
	require.Zero(t, rows, "both rows deleted by their completions")

	require.True(t, pgrouter.CompleteAllAfterLostReply(ctx, r, []*pgrouter.Lease[int]{a}, 11))
	// 13 is not the statement that deleted b's row.
	require.True(t, pgrouter.CompleteAllAfterLostReply(ctx, r, []*pgrouter.Lease[int]{b}, 13))
	require.NoError(t, r.Close(ctx)) // every event delivered
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired,
		leaserouter.EventCompleted, leaserouter.EventPurged}, evs.of("a"), "a completed, its row gone")
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired,
		leaserouter.EventStaleRejected}, evs.of("b"), "b's row is gone and no statement of b's lease recorded it")
	st, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Purged)
	require.EqualValues(t, 1, st.StaleRejections)
}

// The maintenance round's purge of marks also deletes the records of
// completions that deleted their rows, once older than the keep it is
// given, and keeps the younger ones.
func TestEndedRecordsPurgedAfterTheirKeep(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, `INSERT INTO leaserouter_ended (op, at, tokens, ats) VALUES
		(1, clock_timestamp() - interval '11 minutes', '{1}', ARRAY[clock_timestamp()]),
		(2, clock_timestamp() - interval '9 minutes', '{2}', ARRAY[clock_timestamp()])`)
	require.NoError(t, err)
	sql, names := pgrouter.Statement("purge_abandoned")
	_, err = db.Exec(ctx, sql, bindPositional(names, map[string]any{"keep_us": int64(24 * time.Hour / time.Microsecond),
		"ended_keep_us": int64(10 * time.Minute / time.Microsecond)})...)
	require.NoError(t, err)
	var left []int64
	require.NoError(t, db.QueryRow(ctx, `SELECT array_agg(op ORDER BY op) FROM leaserouter_ended`).Scan(&left))
	require.Equal(t, []int64{2}, left)
}
