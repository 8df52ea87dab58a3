package pgrouter_test

import (
	"context"
	"fmt"
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

// schemaDB is a fresh database (pgtest's, migrated in public) holding the
// given schemas, each created and migrated by MigrateTo, and a pool on it
// whose sessions' search_path names no schema at all: a statement of
// pgrouter's naming one of its objects unqualified fails there, rather
// than find public's.
func schemaDB(t *testing.T, schemas ...string) (nowhere, db *pgxpool.Pool) {
	t.Helper()
	db = pgtest.New(t)
	cfg := db.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = "nowhere"
	nowhere, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(nowhere.Close)
	for _, s := range schemas {
		_, err := db.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize())
		require.NoError(t, err)
		require.NoError(t, pgrouter.MigrateTo(t.Context(), nowhere, pgrouter.MigrateOptions{Schema: s}))
	}
	return nowhere, db
}

// TestSchemaOptionRefusesUnusableNames: a schema name PostgreSQL cannot
// take as written, or that would need more than quoting, is refused by
// New, MigrateTo and FenceIn with an error wrapping ErrInvalidOptions
// that quotes it, before any statement.
func TestSchemaOptionRefusesUnusableNames(t *testing.T) {
	db := pgtest.New(t)
	for _, s := range []string{" ", "\t", " jobs", "jobs ", strings.Repeat("s", 64), `a"b`, "a'b; DROP TABLE leaserouter_jobs; --",
		"a\x00b", "a\nb", "\xff", "pg_jobs", "PG_jobs", "a$$b", "x$$; CREATE TABLE public.injected(); --", "a$b"} {
		_, err := pgrouter.New[string](t.Context(), db, pgrouter.Options{Schema: s})
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "%q", s)
		require.ErrorContains(t, err, "Schema", "%q", s)
		require.ErrorIs(t, pgrouter.MigrateTo(t.Context(), db, pgrouter.MigrateOptions{Schema: s}), leaserouter.ErrInvalidOptions, "%q", s)
		_, err = pgrouter.MigrationSQL(s, 3, false) // a function body, dollar-quoted
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "%q", s)
		tx, err := db.Begin(t.Context())
		require.NoError(t, err)
		require.ErrorIs(t, pgrouter.FenceIn(t.Context(), tx, s, "k", 1), leaserouter.ErrInvalidOptions, "%q", s)
		require.NoError(t, tx.Rollback(t.Context()))
	}
	var n int
	require.NoError(t, db.QueryRow(t.Context(), "SELECT count(*) FROM leaserouter_jobs").Scan(&n))
	_, err := pgrouter.NewClient(t.Context(), db, pgrouter.ClientOptions{Options: pgrouter.Options{Schema: "a"},
		Queues: map[string]pgrouter.QueueConfig{"q": {Options: pgrouter.Options{Schema: "b"}}}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "a queue of a Client in another schema")
}

// TestSchemaMissingOrNotMigrated: New on a schema that does not exist, or
// exists without pgrouter's tables, returns ErrSchemaOutdated naming
// the schema; MigrateTo does not create a schema, and says which is
// missing.
func TestSchemaMissingOrNotMigrated(t *testing.T) {
	_, db := schemaDB(t)
	_, err := db.Exec(t.Context(), `CREATE SCHEMA empty`)
	require.NoError(t, err)
	for _, s := range []string{"empty", "absent"} {
		_, err := pgrouter.New[string](t.Context(), db, pgrouter.Options{Schema: s})
		require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated, s)
		require.ErrorContains(t, err, `schema "`+s+`"`)
	}
	err = pgrouter.MigrateTo(t.Context(), db, pgrouter.MigrateOptions{Schema: "absent"})
	require.ErrorContains(t, err, `schema "absent" does not exist`)
	var exists bool
	require.NoError(t, db.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'absent')").Scan(&exists))
	require.False(t, exists)
}

// TestTwoSchemasSideBySide: Routers of two schemas in one database, each
// on a pool whose search_path finds neither (every name they send is
// qualified), share nothing: a job enqueued in one is invisible to the
// other, which may enqueue the same ID; fences are the schema's own;
// public's tables (pgtest migrated them) are never touched.
func TestTwoSchemasSideBySide(t *testing.T) {
	nowhere, db := schemaDB(t, "alpha", "Beta Two")
	a := routerOn[string](t, nowhere, pgrouter.Options{Schema: "alpha"})
	b := routerOn[string](t, nowhere, pgrouter.Options{Schema: "Beta Two"})
	ctx := t.Context()

	require.NoError(t, a.Enqueue(ctx, "x", "in alpha"))
	_, err := b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "alpha's job leased in Beta Two")
	_, ok, err := b.Get(ctx, "x")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, b.Enqueue(ctx, "x", "in beta"), "the same ID in another schema is another job")

	l, err := a.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "in alpha", l.Payload)
	tx, err := nowhere.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) // a failed assertion must not leave it open: the pool's Close would wait for it
	require.NoError(t, pgrouter.FenceIn(ctx, tx, "alpha", "k", l.Token))
	require.NoError(t, l.CompleteTx(ctx, tx))
	require.NoError(t, tx.Commit(ctx))

	lb, err := b.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "in beta", lb.Payload)
	tx, err = nowhere.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	require.NoError(t, pgrouter.FenceIn(ctx, tx, "Beta Two", "k", 1), "alpha's fence is not Beta Two's")
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, lb.Complete(ctx))

	sa, err := a.ExactStats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sa.Succeeded)
	var inPublic int
	require.NoError(t, db.QueryRow(ctx, "SELECT (SELECT count(*) FROM leaserouter_jobs) + (SELECT count(*) FROM leaserouter_fences)").Scan(&inPublic))
	require.Zero(t, inPublic, "a schema's Router wrote to public's tables")
}

// TestSchemasWakeAndMigrateApart: each schema has its own LISTEN/NOTIFY
// channel (an enqueue in one notifies its channel alone, never the other
// schema's nor the default one; a Router blocked in Acquire is woken by
// its own schema's enqueue, with no poll to wake it) and its own Migrate
// locks (a MigrateTo of one schema never waits for the other's).
func TestSchemasWakeAndMigrateApart(t *testing.T) {
	nowhere, db := schemaDB(t, "alpha", "Beta Two")
	ctx := t.Context()
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	// The default schema's channel is the one of versions before schemas.
	chans := []string{"leaserouter:alpha", "leaserouter:Beta Two", "leaserouter", "sentinel"}
	for _, c := range chans {
		_, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{c}.Sanitize())
		require.NoError(t, err)
	}
	next := func() string {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Channel
	}
	const hour = time.Hour // no poll: only a notification wakes an Acquire
	a := routerOn[string](t, nowhere, pgrouter.Options{Schema: "alpha", PollInterval: hour})
	b := routerOn[string](t, nowhere, pgrouter.Options{Schema: "Beta Two", PollInterval: hour})
	b2 := routerOn[string](t, nowhere, pgrouter.Options{Schema: "Beta Two", PollInterval: hour})
	for _, r := range []*pgrouter.Router[string]{a, b} {
		require.NoError(t, r.Enqueue(ctx, "x", "p"))
		_, err := db.Exec(ctx, "SELECT pg_notify('sentinel', '')")
		require.NoError(t, err)
		require.Equal(t, []string{map[*pgrouter.Router[string]]string{a: chans[0], b: chans[1]}[r], "sentinel"},
			[]string{next(), next()}, "an enqueue notifies its schema's channel alone")
	}
	_, err = b.TryAcquire(ctx, "w")
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, "w")
		if err == nil && l.JobID != "y" {
			err = fmt.Errorf("leased %q, want y", l.JobID)
		}
		got <- err
	}()
	eventually(t, 30*time.Second, "Acquire blocked", func() bool { return pgrouter.Parked(b) == 1 })
	require.NoError(t, b2.Enqueue(ctx, "y", "p"))
	select {
	case err := <-got:
		require.NoError(t, err, "woken by its schema's notification")
	case <-time.After(30 * time.Second):
		t.Fatal("an Acquire of Beta Two not woken by an enqueue in Beta Two")
	}

	_, alphaSession := pgrouter.MigrateLocks("alpha")
	_, betaSession := pgrouter.MigrateLocks("Beta Two")
	_, defaultSession := pgrouter.MigrateLocks("")
	require.NotEqual(t, alphaSession, betaSession)
	require.NotEqual(t, alphaSession, defaultSession)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", alphaSession) // as a Migrate of alpha in progress holds it
	require.NoError(t, err)
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, pgrouter.MigrateTo(mctx, nowhere, pgrouter.MigrateOptions{Schema: "Beta Two"}), "waited for alpha's lock")
	require.NoError(t, pgrouter.Migrate(mctx, db), "the default schema waited for alpha's lock")
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, pgrouter.MigrateTo(short, nowhere, pgrouter.MigrateOptions{Schema: "alpha"}), context.DeadlineExceeded,
		"alpha's Migrate waits for alpha's lock")
	_, err = conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", alphaSession)
	require.NoError(t, err)
}

// TestSchemaFunctionsInlined: in a schema, the SQL functions every lease
// statement calls (the one invariant, how a lease ends, a hand-back, the
// retention rule) are still inlined by the planner: their bodies name
// the schema's objects themselves, and no SET search_path on them stops
// the inlining (which made each statement several times dearer).
func TestSchemaFunctionsInlined(t *testing.T) {
	nowhere, _ := schemaDB(t, "inl")
	// Constant arguments: a volatile one stops the inlining of a table
	// function (the statements pass columns).
	for f, call := range map[string]string{
		"leaserouter_end_lease":      `SELECT * FROM "inl".leaserouter_end_lease('completed', 1, 5, false, 0, '2026-01-01'::timestamptz, '', 0)`,
		"leaserouter_hand_back":      `SELECT * FROM "inl".leaserouter_hand_back(1, false)`,
		"leaserouter_lease_valid":    `SELECT "inl".leaserouter_lease_valid('leased', 1, '2026-01-01'::timestamptz, 1)`,
		"leaserouter_past_retention": `SELECT "inl".leaserouter_past_retention('succeeded', '2026-01-01'::timestamptz)`,
	} {
		rows, err := nowhere.Query(t.Context(), "EXPLAIN (VERBOSE) "+call)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		plan := strings.Join(lines, "\n")
		require.NotContains(t, plan, f, "not inlined:\n%s", plan)
		require.NotContains(t, plan, "Function Scan", "not inlined:\n%s", plan)
	}
}
