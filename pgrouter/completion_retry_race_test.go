package pgrouter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// hookQuerier runs every statement on q, calling before(n, sql) ahead of
// the nth (from 1).
type hookQuerier struct {
	q      pgrouter.Querier
	n      int
	before func(n int, sql string)
}

func (h *hookQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	h.n++
	h.before(h.n, sql)
	return h.q.Query(ctx, sql, args...)
}

func (h *hookQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	h.n++
	h.before(h.n, sql)
	return h.q.Exec(ctx, sql, args...)
}

func (h *hookQuerier) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	h.n++
	h.before(h.n, "batch")
	return h.q.SendBatch(ctx, b)
}

// TestHeartbeatRetryFindsTheCompletionItsLostReplyDeleted: a heartbeat
// round retries a completion whose reply was lost while that earlier
// statement (op 11) still holds the row, its deletion
// not yet committed. The round's skipping leases_end skips the row, its
// leases_ended finds no record yet, and the earlier statement commits
// before the round's inspect reads the row: the row is gone, so
// heldElsewhere takes the lease as refused. The job was completed (by op
// 11, recorded in leaserouter_ended), yet the Router reported
// EventStaleRejected and no EventCompleted/EventPurged, until the round
// read the rows before the records.
func TestHeartbeatRetryFindsTheCompletionItsLostReplyDeleted(t *testing.T) {
	// op 11 commits before the round's nth statement: 1 (control: before
	// its leases_end), 3 (its inspect, after its leases_ended).
	for _, commitBefore := range []int{1, 3} {
		t.Run(fmt.Sprint("commit before statement ", commitBefore), func(t *testing.T) {
			heartbeatRetryAfterLostReply(t, commitBefore)
		})
	}
}

func heartbeatRetryAfterLostReply(t *testing.T, commitBefore int) {
	evs := &eventsOf{}
	r, db := newRouter[int](t, pgrouter.Options{Retention: -1, PollInterval: time.Hour, OnEvent: evs.on})
	ctx := t.Context()
	a := leaseOn(t, r, "a")

	// op 11: the earlier completion, in flight on the server (its client
	// saw the connection fail), the row locked and deleted, not committed.
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	sql, names := pgrouter.Statement("leases_end")
	v := batchValues([]string{a.JobID}, []int64{int64(a.Token)})
	v["retention_us"], v["op"], v["accept_ended"] = int64(0), int64(11), true
	_, err = tx.Exec(ctx, sql, bindPositional(names, v)...)
	require.NoError(t, err)

	committed := false
	q := &hookQuerier{q: db, before: func(n int, sql string) {
		if n == commitBefore && !committed { // 3: leases_inspect.sql, after the round's leases_end and leases_ended
			require.NoError(t, tx.Commit(ctx)) // op 11 commits now
			committed = true
		}
	}}
	later, ok := pgrouter.HeartbeatCompleteAfterLostReply(ctx, r, q, []*pgrouter.Lease[int]{a}, 11)
	require.True(t, ok)
	if !committed { // the round made fewer statements: op 11 commits after it
		require.NoError(t, tx.Commit(ctx))
	}
	var rows int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM leaserouter_jobs`).Scan(&rows))
	require.Zero(t, rows, "op 11 completed a: its row is deleted")
	var recorded int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM leaserouter_ended WHERE op = 11`).Scan(&recorded))
	require.Equal(t, 1, recorded, "and recorded")
	if len(later) == 1 { // kept for the next round: it must then find op 11's record
		_, ok = pgrouter.HeartbeatCompleteAfterLostReply(ctx, r, db, later, 11)
		require.True(t, ok)
	}
	require.NoError(t, r.Close(ctx)) // every event delivered
	require.Equal(t, []leaserouter.EventKind{leaserouter.EventEnqueued, leaserouter.EventLeaseAcquired,
		leaserouter.EventCompleted, leaserouter.EventPurged}, evs.of("a"), "a was completed by op 11")
	st, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.StaleRejections)
}
