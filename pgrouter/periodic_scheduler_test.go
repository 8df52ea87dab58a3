package pgrouter_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// onceAt is a Schedule of one tick, at.
type onceAt struct{ at time.Time }

func (s onceAt) Next(t time.Time) time.Time {
	if t.Before(s.at) {
		return s.at
	}
	return time.Time{}
}

// stalledTick registers the periodic job name of queue (since an hour
// ago) and returns its tick one second ago, in microseconds as the
// database holds it.
func stalledTick(t *testing.T, db *pgxpool.Pool, queue, name string) time.Time {
	t.Helper()
	var tick time.Time
	require.NoError(t, db.QueryRow(t.Context(), `INSERT INTO leaserouter_periodic (queue, name, since)
		VALUES ($1, $2, clock_timestamp() - interval '1 hour') RETURNING date_trunc('second', clock_timestamp()) - interval '1 second'`,
		queue, name).Scan(&tick))
	return tick
}

// A scheduler stalled inside its tick (a process stopped or cut off from
// the network, whose session and row lock live on) delays that tick's
// job only: another process's AddPeriodic of the name returns, its other
// periodic jobs go on at their ticks, and when the stalled transaction
// rolls back (the process killed at last) the tick it took, younger than
// the retention, is enqueued once by the live scheduler. The stalled one here
// is a transaction that took the tick as a scheduler does (raised the
// job's last tick) and inserted its job, then stopped.
func TestPeriodicStalledTickDelaysOnlyItsOwnJob(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	const queue = "stall"
	tick := stalledTick(t, db, queue, "stalled")
	id := leaserouter.TickID("stalled", tick)

	other := routerOn[int](t, db, pgrouter.Options{Queue: queue})
	stalled, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = stalled.Rollback(context.Background()) }()
	tag, err := stalled.Exec(ctx, "UPDATE leaserouter_periodic SET last_tick = $3 WHERE queue = $1 AND name = $2", queue, "stalled", tick)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	require.NoError(t, other.EnqueueTx(ctx, stalled, id, 0, leaserouter.WithRunAt(tick)))

	var events enqueuedEvents
	r := routerOn[int](t, db, pgrouter.Options{Queue: queue, OnEvent: events.hook})
	add, cancel := context.WithTimeout(ctx, 10*time.Second) // the stall lasts as long as the test: bounded
	defer cancel()
	require.NoError(t, r.AddPeriodic(add, pgrouter.Periodic[int]{Name: "stalled", Schedule: onceAt{tick}}),
		"AddPeriodic of the stalled job's name")
	awaitWakes(t, r, 1) // the deferred tick tried (it was due at once)
	require.NoError(t, r.AddPeriodic(add, pgrouter.Periodic[int]{Name: "beat", Schedule: leaserouter.Every(20 * time.Millisecond)}),
		"AddPeriodic of another job")
	beats := func() int { return len(tickJobs(t, db, queue, "beat")) }
	eventually(t, 20*time.Second, "20 ticks of the other job while the tick is deferred", func() bool { return beats() >= 20 })
	_, found, err := r.Get(ctx, id)
	require.NoError(t, err)
	require.False(t, found, "the deferred tick's job is the stalled transaction's, not committed")

	require.NoError(t, stalled.Rollback(ctx), "the stalled scheduler's transaction ends without its commit")
	eventually(t, 20*time.Second, "the deferred tick's job", func() bool {
		_, found, err := r.Get(ctx, id)
		require.NoError(t, err)
		return found
	})
	// The event is delivered after the commit, on the delivery goroutine.
	eventually(t, 10*time.Second, "the tick's EventEnqueued", func() bool { return events.get()[id] > 0 })
	require.Equal(t, 1, events.get()[id], "the deferred tick enqueued once")
	var last time.Time
	require.NoError(t, db.QueryRow(ctx, "SELECT last_tick FROM leaserouter_periodic WHERE queue = $1 AND name = 'stalled'", queue).Scan(&last))
	require.True(t, last.Equal(tick), "last tick %v, want %v", last, tick)
}

// A scheduler stalled inside its tick's own transaction, for good (never
// committing nor rolling back: a process SIGSTOPped there), locks the
// job's row only until the server ends its session for idling in the
// transaction (the tick's statement bounds it); the transaction rolls
// back and a live scheduler takes the tick, once.
func TestPeriodicStalledSchedulerLosesTheTick(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	const queue = "stopped"
	tick := stalledTick(t, db, queue, "stalled")
	id := leaserouter.TickID("stalled", tick)

	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	stalled, err := conn.Begin(ctx)
	require.NoError(t, err)
	sql, names := pgrouter.Statement("periodic_tick")
	var taken, locked bool
	require.NoError(t, stalled.QueryRow(ctx, sql, bindPositional(names, map[string]any{"queue": queue, "name": "stalled", "tick": tick,
		"retention_us": time.Hour.Microseconds(), "lock_timeout_ms": 1000, "idle_timeout_ms": 1000})...).Scan(&taken, &locked))
	require.Equal(t, []bool{true, false}, []bool{taken, locked}, "the stalled scheduler takes the tick")

	var events enqueuedEvents
	r := routerOn[int](t, db, pgrouter.Options{Queue: queue, OnEvent: events.hook})
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: "stalled", Schedule: onceAt{tick}}))
	eventually(t, 30*time.Second, "the tick of the stalled scheduler's job", func() bool {
		_, found, err := r.Get(ctx, id)
		require.NoError(t, err)
		return found
	})
	// The event is delivered after the commit, on the delivery goroutine.
	eventually(t, 10*time.Second, "the tick's EventEnqueued", func() bool { return events.get()[id] > 0 })
	require.Equal(t, 1, events.get()[id], "the tick enqueued once")
	require.Error(t, stalled.Commit(ctx), "the stalled scheduler's session was ended")
	var n int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE queue = $1", queue).Scan(&n))
	require.Equal(t, 1, n)
}
