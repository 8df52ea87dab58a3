package pgrouter_test

// Review 2 (cold review of periodic ticks taken once, migration 12).

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// review2Take runs periodic_tick.sql for tick in its own transaction,
// committed, and returns taken and held.
func review2Take(t *testing.T, db *pgxpool.Pool, queue, name string, tick time.Time, retention time.Duration) (taken, held bool) {
	t.Helper()
	tx, err := db.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	sql, names := pgrouter.Statement("periodic_tick")
	require.NoError(t, tx.QueryRow(t.Context(), sql, bindPositional(names, map[string]any{"queue": queue, "name": name, "tick": tick,
		"retention_us": retention.Microseconds(), "lock_timeout_ms": 1000, "idle_timeout_ms": 5000, "txn_timeout_ms": 5000})...).Scan(&taken, &held))
	require.NoError(t, tx.Commit(t.Context()))
	return taken, held
}

// Guard (passes): schedulers of different Retentions never take a tick
// twice: one of a short Retention prunes the record of a tick taken by
// one of a long Retention, and raises taken_to over it.
func TestReview2TickOnceAcrossRetentions(t *testing.T) {
	db := pgtest.New(t)
	const queue, name = "retentions", "p"
	now := stalledTick(t, db, queue, name) // since an hour ago
	old := now.Add(-30 * time.Minute)      // younger than the long Retention
	taken, _ := review2Take(t, db, queue, name, old, time.Hour)
	require.True(t, taken)
	taken, _ = review2Take(t, db, queue, name, now, time.Minute) // prunes old's record
	require.True(t, taken)
	taken, _ = review2Take(t, db, queue, name, old, time.Hour)
	require.False(t, taken, "a tick taken again after a shorter Retention's taker pruned its record")
}

// Rolling upgrade: a process of the previous version (bbe4516) accepts a
// database at schema 12 (schemaReady accepts newer ones) and goes on
// taking ticks with its periodic_tick.sql, which moves last_tick and
// leaves no record in leaserouter_periodic_ticks nor raises taken_to. A
// new scheduler that planned the same tick (or held it while the old one
// had the row locked) then takes it again: the tick is taken twice (its
// job is kept once only by the jobs' primary key while that job exists;
// deleted by an operator, the second take enqueues it again).
func TestReview2TickTakenByAnOldVersionNotTakenAgain(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	const queue, name = "rolling", "p"
	tick := stalledTick(t, db, queue, name)
	// bbe4516's sql/periodic_tick.sql, as the old process runs it.
	tag, err := db.Exec(ctx, `UPDATE leaserouter_periodic
		SET last_tick = $3::timestamptz
		WHERE queue = $1 AND name = $2
			AND $3::timestamptz >= since
			AND (last_tick IS NULL OR last_tick < $3::timestamptz)
			AND $3::timestamptz <= clock_timestamp()
			AND clock_timestamp() < $3::timestamptz + $4::bigint * interval '1 microsecond'`,
		queue, name, tick, time.Hour.Microseconds())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "the old-version scheduler takes the tick")
	taken, held := review2Take(t, db, queue, name, tick, time.Hour)
	require.False(t, held)
	require.False(t, taken, "a tick the old-version scheduler took, taken again by the new one")
}
