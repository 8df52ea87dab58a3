package pgrouter_test

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// catalogOf lists what schema holds, from pg_catalog, each object's
// definition with the schema's name taken out (so that two schemas
// compare): its relations (with their options), columns in order (type,
// null, default), constraints, indexes, sequences, types (enum labels),
// functions (whole definitions), triggers and statistics objects.
func catalogOf(t *testing.T, db *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := db.Query(t.Context(), `WITH n AS (SELECT oid, quote_ident(nspname) || '.' AS q, '"' || nspname || '".' AS qq FROM pg_namespace WHERE nspname = $1)
	SELECT replace(replace(x, n.qq, ''), n.q, '') FROM n, LATERAL (
		SELECT 'relation ' || c.relkind::text || ' ' || c.relname || ' ' || coalesce(c.reloptions::text, '')
		FROM pg_class c WHERE c.relnamespace = n.oid
		UNION ALL
		SELECT 'column ' || c.relname || ' ' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) || ' ' || a.attname || ' ' ||
			format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
			coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid AND c.relkind = 'r' AND c.relnamespace = n.oid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attnum > 0 AND NOT a.attisdropped
		UNION ALL
		SELECT 'constraint ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
		FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE k.connamespace = n.oid
		UNION ALL
		SELECT 'index ' || pg_get_indexdef(i.indexrelid) || CASE WHEN i.indisvalid THEN '' ELSE ' INVALID' END
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = n.oid
		UNION ALL
		SELECT 'sequence ' || c.relname || ' ' || format_type(s.seqtypid, NULL) || ' cache ' || s.seqcache
		FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid WHERE c.relnamespace = n.oid
		UNION ALL
		SELECT 'type ' || t.typname || ' ' || t.typtype::text || ' ' ||
			coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), '')
		FROM pg_type t WHERE t.typnamespace = n.oid
		UNION ALL
		SELECT 'function ' || pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.pronamespace = n.oid
		UNION ALL
		SELECT 'trigger ' || pg_get_triggerdef(g.oid)
		FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid WHERE c.relnamespace = n.oid AND NOT g.tgisinternal
		UNION ALL
		SELECT 'statistics ' || s.stxname || ' ' || s.stxkeys::text || ' ' || s.stxkind::text
		FROM pg_statistic_ext s WHERE s.stxnamespace = n.oid) objects(x)`, schema)
	require.NoError(t, err)
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	slices.Sort(list)
	return list
}

// schemaVersion is the highest version recorded in schema, 0 if none
// (or no table).
func schemaVersion(t *testing.T, db *pgxpool.Pool, schema string) int {
	t.Helper()
	table := pgx.Identifier{schema, "leaserouter_migrations"}.Sanitize()
	var exists bool
	require.NoError(t, db.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
	var v *int
	if exists {
		require.NoError(t, db.QueryRow(t.Context(), "SELECT max(version) FROM "+table).Scan(&v))
	}
	if v == nil {
		return 0
	}
	return *v
}

// TestMigrateDownUndoesEachVersionExactly: going down from the latest
// version one version at a time, the schema at each version is the one
// MigrateTo makes going up to it from nothing (pg_catalog's listing:
// columns, indexes, functions, types, sequences, triggers, statistics),
// down to nothing at all of pgrouter's; up again, it is the latest's, and
// a Router works on it.
func TestMigrateDownUndoesEachVersionExactly(t *testing.T) {
	nowhere, db := schemaDB(t, "walk")
	ctx := t.Context()
	_, err := db.Exec(ctx, "CREATE SCHEMA fresh")
	require.NoError(t, err)
	latest := pgrouter.LatestVersion()
	require.Equal(t, latest, schemaVersion(t, db, "walk"))
	versions := append([]int{0}, migrationVersions(t)...)
	up := map[int][]string{0: catalogOf(t, db, "fresh")}
	for i, v := range versions[1:] {
		require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "fresh", Version: v}))
		require.Equal(t, v, schemaVersion(t, db, "fresh"))
		up[v] = catalogOf(t, db, "fresh")
		require.NotEqual(t, up[versions[i]], up[v], "version %d changes nothing", v)
	}
	r := routerOn[string](t, nowhere, pgrouter.Options{Schema: "walk"})
	require.NoError(t, r.Enqueue(ctx, "before", "p"))
	require.NoError(t, r.Close(ctx))
	for _, v := range slices.Backward(versions[:len(versions)-1]) {
		target := v
		if v == 0 {
			target = pgrouter.VersionNone
		}
		require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "walk", Version: target, Down: true}), "down to %d", v)
		require.Equal(t, v, schemaVersion(t, db, "walk"))
		require.Equal(t, up[v], catalogOf(t, db, "walk"), "down to version %d", v)
	}
	require.Empty(t, catalogOf(t, db, "walk"), "something of pgrouter's left")

	require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "walk"}))
	require.Equal(t, up[latest], catalogOf(t, db, "walk"))
	r = routerOn[string](t, nowhere, pgrouter.Options{Schema: "walk"})
	_, ok, err := r.Get(ctx, "before")
	require.NoError(t, err)
	require.False(t, ok, "the jobs went with version 1")
	require.NoError(t, r.Enqueue(ctx, "after", "p"))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Complete(ctx))
}

// TestMigrateDownToAVersionKeepsTheJobs: down to a version and up again,
// a job enqueued before is still there, pending, with what the versions
// kept (its payload); the default schema goes down to nothing and up as
// a named one does; a version out of range is refused.
func TestMigrateDownToAVersionKeepsTheJobs(t *testing.T) {
	nowhere, db := schemaDB(t, "mid")
	ctx := t.Context()
	r := routerOn[string](t, nowhere, pgrouter.Options{Schema: "mid"})
	require.NoError(t, r.Enqueue(ctx, "kept", "payload"))
	require.NoError(t, r.Close(ctx))
	for _, v := range []int{13, 10, 4} {
		require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "mid", Version: v, Down: true}))
		require.Equal(t, v, schemaVersion(t, db, "mid"))
		_, err := pgrouter.New[string](ctx, nowhere, pgrouter.Options{Schema: "mid"})
		require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated)
		require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "mid"}))
		r := routerOn[string](t, nowhere, pgrouter.Options{Schema: "mid"})
		j, ok, err := r.Get(ctx, "kept")
		require.NoError(t, err)
		require.True(t, ok, "down to %d", v)
		require.Equal(t, leaserouter.StatePending, j.State)
		require.Equal(t, "payload", j.Payload)
	}

	latest := catalogOf(t, db, "public")
	require.NoError(t, pgrouter.MigrateTo(ctx, db, pgrouter.MigrateOptions{Version: pgrouter.VersionNone}))
	require.Empty(t, catalogOf(t, db, "public"))
	require.NoError(t, pgrouter.Migrate(ctx, db))
	require.Equal(t, latest, catalogOf(t, db, "public"))
	require.Equal(t, catalogOf(t, db, "mid"), catalogOf(t, db, "public"), "a schema's objects are the default one's")

	for _, v := range []int{-2, pgrouter.LatestVersion() + 1} {
		require.ErrorIs(t, pgrouter.MigrateTo(ctx, db, pgrouter.MigrateOptions{Version: v}), leaserouter.ErrInvalidOptions)
	}
}

// TestMigrateToGoesDownOnlyWhenAsked: MigrateTo with a Version below the
// schema's goes down only with Down (code pinning a Version, run against
// a database a newer release migrated, removes nothing), and a version
// recorded above this module's (a newer pgrouter's) is left alone going
// up, as Migrate leaves it.
func TestMigrateToGoesDownOnlyWhenAsked(t *testing.T) {
	nowhere, db := schemaDB(t, "pin")
	ctx := t.Context()
	latest := pgrouter.LatestVersion()
	want := catalogOf(t, db, "pin")
	require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "pin", Version: 16}))
	require.Equal(t, latest, schemaVersion(t, db, "pin"), "no Down: nothing undone")
	require.Equal(t, want, catalogOf(t, db, "pin"))
	require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "pin", Version: 16, Down: true}))
	require.Equal(t, 16, schemaVersion(t, db, "pin"))
	require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "pin"}))

	_, err := db.Exec(ctx, "INSERT INTO pin.leaserouter_migrations (version, name) VALUES (99, '0099_future.sql')")
	require.NoError(t, err)
	require.NoError(t, pgrouter.MigrateTo(ctx, nowhere, pgrouter.MigrateOptions{Schema: "pin", Version: latest}),
		"a newer release's version left alone going up")
	require.NoError(t, pgrouter.Migrate(ctx, db))
}
