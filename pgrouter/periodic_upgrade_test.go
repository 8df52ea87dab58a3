package pgrouter_test

// A rolling upgrade: processes of a version before the tick records
// (schema 12) schedule on a database this version migrated, beside
// processes of this version. They take a tick by raising
// leaserouter_periodic.last_tick alone; the database records that tick
// for them (schema 13), so no scheduler of this version takes it again.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// previousTakes are the statements with which schedulers of earlier
// versions take a tick, verbatim from their sql/periodic_tick.sql: they
// raise last_tick and write no tick record. Each returns a row (or, for
// the first, affects one) when it took the tick.
var previousTakes = []struct{ name, commit, sql string }{
	{name: "Wait", commit: "5715659", sql: `
UPDATE leaserouter_periodic
SET last_tick = @tick::timestamptz
WHERE queue = @queue AND name = @name
	AND @tick::timestamptz >= since
	AND (last_tick IS NULL OR last_tick < @tick::timestamptz)
	AND @tick::timestamptz <= clock_timestamp()
	AND clock_timestamp() < @tick::timestamptz + @retention_us::bigint * interval '1 microsecond'`},
	{name: "SkipLocked", commit: "d39e975", sql: `
WITH bounds AS (
	SELECT set_config('lock_timeout', @lock_timeout_ms::bigint::text, true),
		set_config('idle_in_transaction_session_timeout', @idle_timeout_ms::bigint::text, true)
), locked AS (
	SELECT queue, name FROM leaserouter_periodic
	WHERE queue = @queue AND name = @name
	FOR UPDATE SKIP LOCKED
), taken AS (
	UPDATE leaserouter_periodic p
	SET last_tick = @tick::timestamptz
	FROM locked
	WHERE p.queue = locked.queue AND p.name = locked.name
		AND @tick::timestamptz >= p.since
		AND (p.last_tick IS NULL OR p.last_tick < @tick::timestamptz)
		AND @tick::timestamptz <= clock_timestamp()
		AND clock_timestamp() < @tick::timestamptz + @retention_us::bigint * interval '1 microsecond'
	RETURNING 1
)
SELECT EXISTS (SELECT FROM taken) AS taken,
	NOT EXISTS (SELECT FROM locked)
		AND EXISTS (SELECT FROM leaserouter_periodic WHERE queue = @queue AND name = @name) AS held
FROM bounds`},
}

// previousTake runs take in tx for tick of name on queue (Retention an
// hour, the other bounds as its scheduler set them) and reports whether
// it took the tick.
func previousTake(t *testing.T, tx pgx.Tx, sql, queue, name string, tick time.Time) bool {
	t.Helper()
	a := pgx.NamedArgs{"queue": queue, "name": name, "tick": tick, "retention_us": time.Hour.Microseconds(),
		"lock_timeout_ms": 1000, "idle_timeout_ms": 5000}
	if !strings.Contains(sql, "SELECT EXISTS") {
		tag, err := tx.Exec(t.Context(), sql, a)
		require.NoError(t, err)
		return tag.RowsAffected() == 1
	}
	var taken, locked bool // the statement's second column, named held then, is locked
	require.NoError(t, tx.QueryRow(t.Context(), sql, a).Scan(&taken, &locked))
	return taken
}

// previousTakeCommitted runs take for tick in a transaction of its own,
// committed.
func previousTakeCommitted(t *testing.T, db *pgxpool.Pool, sql, queue, name string, tick time.Time) bool {
	t.Helper()
	tx, err := db.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	taken := previousTake(t, tx, sql, queue, name, tick)
	require.NoError(t, tx.Commit(t.Context()))
	return taken
}

// A tick a previous version's scheduler took is never taken again by a
// scheduler of this version, even once its job is gone (deleted by an
// operator): the new scheduler planned the same tick, found the job's
// row locked by the old one's transaction and kept the tick to try again;
// the old one inserted the tick's job and committed; an operator deleted
// the job; the new scheduler's next try finds the tick taken and
// enqueues nothing. The old scheduler took an earlier tick before, so
// its take raises last_tick from a tick (the trigger's raise), not from
// none.
func TestPeriodicTickTakenByAPreviousVersionNotTakenAgain(t *testing.T) {
	for _, prev := range previousTakes {
		t.Run(prev.name, func(t *testing.T) {
			db := pgtest.New(t)
			ctx := t.Context()
			const queue, name = "rolling", "p"
			tick := stalledTick(t, db, queue, name)
			id := leaserouter.TickID(name, tick)
			op := routerOn[int](t, db, pgrouter.Options{Queue: queue}) // the old process's job insert; the operator
			// An earlier tick the previous version took: the take below
			// raises last_tick from it, not from none (the job's first).
			require.True(t, previousTakeCommitted(t, db, prev.sql, queue, name, tick.Add(-time.Minute)))

			old, err := db.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = old.Rollback(context.Background()) }()
			require.True(t, previousTake(t, old, prev.sql, queue, name, tick), "the previous version's scheduler takes the tick")

			// The new scheduler: its tries of the tick are stopped, once
			// armed, before they reach the database.
			stall := newStallQuery(func(sql string) bool { return strings.Contains(sql, "INSERT INTO leaserouter_periodic_ticks") })
			pool := stall.poolOn(t, db)
			defer stall.Release()
			r := routerOn[int](t, pool, pgrouter.Options{Queue: queue})
			require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: name, Schedule: onceAt{tick}}))
			awaitWakes(t, r, 1) // the tick planned and found locked
			stall.armed.Store(true)
			select {
			case <-stall.pid: // the next try of the deferred tick, stopped
			case <-time.After(20 * time.Second):
				t.Fatal("the new scheduler never tried its deferred tick again")
			}
			wakes := pgrouter.PeriodicWakes(r)

			require.NoError(t, op.EnqueueTx(ctx, old, id, 0, leaserouter.WithRunAt(tick)), "the old scheduler's job insert")
			require.NoError(t, old.Commit(ctx))
			require.Equal(t, []string{id}, tickJobs(t, db, queue, name))
			require.NoError(t, op.Delete(ctx, id), "an operator deletes the tick's job")

			stall.Release()
			awaitWakes(t, r, wakes+1) // the deferred tick tried again
			require.Empty(t, tickJobs(t, db, queue, name), "the tick the previous version took, enqueued again")
			s, err := r.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, s.Enqueued)
		})
	}
}

// The previous version's catch-up (a scheduler woken late takes the
// latest due tick, raising last_tick over older ones) gives up none of
// the ticks it skips for this version's schedulers: T1 and T3 taken by
// the old scheduler are never taken again; T2, which it skipped and no
// one took, is taken once by a scheduler of this version that kept it
// (one that planned it in time, its row locked then). And the old
// scheduler takes no tick this version took (it takes only ticks after
// last_tick, which this version's taker raises).
func TestPeriodicTickSkippedByAPreviousVersionTakenOnce(t *testing.T) {
	for _, prev := range previousTakes {
		t.Run(prev.name, func(t *testing.T) {
			db := pgtest.New(t)
			const queue, name = "catchup", "p"
			now := stalledTick(t, db, queue, name)
			t1, t2, t3, t4 := now.Add(-4*time.Minute), now.Add(-3*time.Minute), now.Add(-2*time.Minute), now.Add(-time.Minute)

			require.True(t, previousTakeCommitted(t, db, prev.sql, queue, name, t1))
			require.True(t, previousTakeCommitted(t, db, prev.sql, queue, name, t3), "woken late: T2 skipped")

			for _, tick := range []time.Time{t1, t3} {
				taken, locked := takeTick(t, db, queue, name, tick, time.Hour)
				require.False(t, locked)
				require.False(t, taken, "tick %v, taken by the previous version, taken again", tick)
			}
			taken, _ := takeTick(t, db, queue, name, t2, time.Hour)
			require.True(t, taken, "the tick the previous version skipped, kept by this version's scheduler")
			taken, _ = takeTick(t, db, queue, name, t2, time.Hour)
			require.False(t, taken, "T2 taken twice")

			taken, _ = takeTick(t, db, queue, name, t4, time.Hour)
			require.True(t, taken)
			require.False(t, previousTakeCommitted(t, db, prev.sql, queue, name, t4), "the previous version takes a tick this one took")
			require.False(t, previousTakeCommitted(t, db, prev.sql, queue, name, t2), "the previous version takes a tick this one took")
		})
	}
}

// asVersion12 makes db's schema as version 12 left it: no trigger
// recording the ticks a previous version takes, migration 13 not
// recorded.
func asVersion12(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	_, err := db.Exec(t.Context(), `DROP TRIGGER leaserouter_periodic_record_tick ON leaserouter_periodic;
		DROP FUNCTION leaserouter_periodic_record_tick; DELETE FROM leaserouter_migrations WHERE version >= 13`)
	require.NoError(t, err)
}

// A tick a previous version's scheduler took while the database was at
// version 12 (before the database recorded its ticks) is not taken again
// once Migrate brought it to this version (New refuses the database
// until then); later ticks go on being taken once each, by either
// version.
func TestPeriodicTickTakenAtVersion12ByAPreviousVersionNotTakenAgain(t *testing.T) {
	for _, prev := range previousTakes {
		t.Run(prev.name, func(t *testing.T) {
			db := pgtest.New(t)
			const queue, name = "at12", "p"
			now := stalledTick(t, db, queue, name)
			t1, t2, t3 := now.Add(-3*time.Minute), now.Add(-2*time.Minute), now.Add(-time.Minute)
			asVersion12(t, db)
			require.True(t, previousTakeCommitted(t, db, prev.sql, queue, name, t1))
			require.True(t, previousTakeCommitted(t, db, prev.sql, queue, name, t2))

			_, err := pgrouter.New[int](t.Context(), db, pgrouter.Options{Queue: queue})
			require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated, "New on a database at version 12")
			require.NoError(t, pgrouter.Migrate(t.Context(), db))
			for _, tick := range []time.Time{t1, t2} {
				taken, _ := takeTick(t, db, queue, name, tick, time.Hour)
				require.False(t, taken, "tick %v, taken by the previous version at version 12, taken again", tick)
			}
			require.True(t, previousTakeCommitted(t, db, prev.sql, queue, name, t3))
			taken, _ := takeTick(t, db, queue, name, t3, time.Hour)
			require.False(t, taken, "a tick the previous version took after Migrate, taken again")
			taken, _ = takeTick(t, db, queue, name, now, time.Hour)
			require.True(t, taken)
		})
	}
}

// Migrate installs the tick records at READ COMMITTED whatever the
// database's default_transaction_isolation: a tick a previous version's
// scheduler takes while Migrate waits for the table's lock (its
// transaction holds the row) is seen by the install's raise of taken_to
// once it commits, and is not taken again; Migrate does not fail on it
// either. Under a repeatable-read default, the install read the table as
// it was before that take: the job's first tick was missed (taken again),
// a later one failed Migrate with a serialization failure (40001).
func TestPeriodicTickTakenWhileMigrateWaitsNotTakenAgainWhateverTheDefaultIsolation(t *testing.T) {
	for _, earlier := range []bool{false, true} {
		t.Run(map[bool]string{false: "FirstTick", true: "LaterTick"}[earlier], func(t *testing.T) {
			db := pgtest.New(t)
			ctx := t.Context()
			const queue, name = "isolation", "p"
			now := stalledTick(t, db, queue, name)
			t1 := now.Add(-time.Minute)
			asVersion12(t, db)
			var dbname string
			require.NoError(t, db.QueryRow(ctx, "SELECT current_database()").Scan(&dbname))
			_, err := db.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{dbname}.Sanitize()+" SET default_transaction_isolation = 'repeatable read'")
			require.NoError(t, err)
			db.Reset() // the setting is read as a session starts

			prev := previousTakes[1]
			if earlier {
				require.True(t, previousTakeCommitted(t, db, prev.sql, queue, name, t1.Add(-time.Minute)))
			}
			old, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
			require.NoError(t, err)
			defer func() { _ = old.Rollback(context.Background()) }()
			require.True(t, previousTake(t, old, prev.sql, queue, name, t1))

			done := make(chan error, 1)
			go func() { done <- pgrouter.Migrate(context.Background(), db) }()
			eventually(t, 20*time.Second, "Migrate waiting for the table's lock", func() bool {
				var waiting bool
				require.NoError(t, db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
					WHERE NOT granted AND relation = 'leaserouter_periodic'::regclass)`).Scan(&waiting))
				return waiting
			})
			require.NoError(t, old.Commit(ctx))
			require.NoError(t, <-done)
			taken, _ := takeTick(t, db, queue, name, t1, time.Hour)
			require.False(t, taken, "the tick the previous version took while Migrate waited, taken again")
		})
	}
}

// Migrating to version 13 gives up every tick at or before the job's
// latest taken that no one took, as its docs say, not only one a stalled
// transaction locked: here T1, kept by a scheduler of version 12 to try
// again (deferred: nothing locks the row) while it took T2, is not taken
// after Migrate.
func TestMigrateTo13GivesUpEveryUntakenTickUpToTheLatestTaken(t *testing.T) {
	db := pgtest.New(t)
	const queue, name = "giveup", "p"
	now := stalledTick(t, db, queue, name)
	t1, t2 := now.Add(-2*time.Minute), now.Add(-time.Minute)
	asVersion12(t, db)
	taken, _ := takeTick(t, db, queue, name, t2, time.Hour)
	require.True(t, taken)
	require.NoError(t, pgrouter.Migrate(t.Context(), db))
	taken, locked := takeTick(t, db, queue, name, t1, time.Hour)
	require.False(t, locked)
	require.False(t, taken, "T1, at or before the latest tick taken at install, taken")
}
