package pgrouter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// dbNow is the database's clock.
func dbNow(t *testing.T, db *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, db.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now))
	return now
}

// rowOf reads job id's ready time and why its latest lease ended, from
// the table.
func rowOf(t *testing.T, db *pgxpool.Pool, id string) (readyAt time.Time, ended string) {
	t.Helper()
	require.NoError(t, db.QueryRow(context.Background(),
		"SELECT ready_at, ended FROM leaserouter_jobs WHERE id = $1", id).Scan(&readyAt, &ended))
	return readyAt, ended
}

// eventLog collects a Router's events (OnEvent).
type eventLog struct {
	mu  sync.Mutex
	evs []leaserouter.Event
}

func (e *eventLog) add(ev leaserouter.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

// of returns the events of kind k so far.
func (e *eventLog) of(k leaserouter.EventKind) []leaserouter.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []leaserouter.Event
	for _, ev := range e.evs {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// TestSnoozeSchedulesAtDatabaseNowPlusDelay: Snooze(d) schedules the job
// until the database's clock at the snooze + d (not leased before), and
// Snooze(0) makes it pending at once, ready since the snooze.
func TestSnoozeSchedulesAtDatabaseNowPlusDelay(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	const d = 300 * time.Millisecond

	l := leaseOn(t, r, "later")
	before := dbNow(t, db)
	require.NoError(t, l.Snooze(ctx, d))
	after := dbNow(t, db)
	j, _, err := r.Get(ctx, "later")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateScheduled, j.State)
	require.Equal(t, 0, j.Attempt)
	require.False(t, j.RunAt.Before(before.Add(d)), "run-at %v, database clock before the snooze %v", j.RunAt, before)
	require.False(t, j.RunAt.After(after.Add(d)), "run-at %v, database clock after the snooze %v", j.RunAt, after)
	_, ended := rowOf(t, db, "later")
	require.Equal(t, string(leaserouter.LostSnoozed), ended)
	if dbNow(t, db).Before(j.RunAt) {
		_, err = r.TryAcquire(ctx, "w")
		require.ErrorIs(t, err, leaserouter.ErrNoJob, "not ready before its run-at")
	}
	awaitDBTime(t, db, j.RunAt)
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err, "ready once the database's clock passed its run-at")
	require.Equal(t, "later", l.JobID)
	require.Equal(t, 1, l.Attempt)
	require.NoError(t, l.Complete(ctx))

	l = leaseOn(t, r, "now")
	before = dbNow(t, db)
	require.NoError(t, l.Snooze(ctx, 0))
	after = dbNow(t, db)
	j, _, err = r.Get(ctx, "now")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StatePending, j.State, "Snooze(0): pending at once")
	require.True(t, j.RunAt.IsZero())
	readyAt, _ := rowOf(t, db, "now")
	require.False(t, readyAt.Before(before) || readyAt.After(after), "ready since the snooze: %v not in [%v, %v]", readyAt, before, after)
	l, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "now", l.JobID)
	require.Equal(t, 1, l.Attempt)
}

// TestSnoozeOfNilLeaseRefusesNegativeDelay: a negative delay is checked
// before anything else, so a nil lease gets ErrInvalidOptions too, not a
// LeaseLostError. (A valid lease's refusal is the conformance row
// "snooze/a negative delay refused with ErrInvalidOptions".)
func TestSnoozeOfNilLeaseRefusesNegativeDelay(t *testing.T) {
	var nilLease *pgrouter.Lease[int]
	err := nilLease.Snooze(t.Context(), -time.Second)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.NotErrorIs(t, err, leaserouter.ErrLeaseLost)
}
