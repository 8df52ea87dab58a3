package pgrouter_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// applyScript runs s as a tool would: a NoTransaction script statement by
// statement, each on its own (autocommit); any other as one request,
// which PostgreSQL runs in one transaction.
func applyScript(t *testing.T, db *pgxpool.Pool, s pgrouter.MigrationScript) {
	t.Helper()
	if !s.NoTransaction {
		_, err := db.Exec(t.Context(), s.SQL)
		require.NoError(t, err, s.Name)
		return
	}
	for stmt := range strings.SplitSeq(s.SQL, ";\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		_, err := db.Exec(t.Context(), stmt)
		require.NoError(t, err, "%s: %s", s.Name, stmt)
	}
}

// stripComments is text without its "--" comment lines.
func stripComments(text string) string {
	var b strings.Builder
	for l := range strings.Lines(text) {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// TestMigrationSQLAppliedByHandMakesMigratesSchema: MigrationSQL's
// scripts of every version, run in order as a migration tool runs them
// (no lock, no retry), make the schema MigrateTo makes (pg_catalog's
// listing), which New accepts and a Router works on; its down scripts,
// run in order from the latest, leave nothing of pgrouter's; a
// concurrent version's scripts say NoTransaction, both ways.
func TestMigrationSQLAppliedByHandMakesMigratesSchema(t *testing.T) {
	nowhere, db := schemaDB(t, "migrated")
	ctx := t.Context()
	_, err := db.Exec(ctx, `CREATE SCHEMA "By Hand"`)
	require.NoError(t, err)
	latest := pgrouter.LatestVersion()
	for _, v := range migrationVersions(t) {
		s, err := pgrouter.MigrationSQL("By Hand", v, false)
		require.NoError(t, err)
		require.Equal(t, v, s.Version)
		require.Contains(t, s.SQL, `"By Hand".leaserouter_migrations`)
		d, err := pgrouter.MigrationSQL("By Hand", v, true)
		require.NoError(t, err)
		require.Equal(t, s.NoTransaction, d.NoTransaction, "version %d", v)
		require.Equal(t, s.NoTransaction, strings.Contains(stripComments(s.SQL), "CONCURRENTLY"), "version %d", v)
		_, err = pgrouter.New[string](ctx, nowhere, pgrouter.Options{Schema: "By Hand"})
		require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated, "at version %d", v-1)
		applyScript(t, nowhere, s)
		got, err := pgrouter.SchemaVersion(ctx, nowhere, "By Hand")
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	require.Equal(t, catalogOf(t, db, "migrated"), catalogOf(t, db, "By Hand"))
	r := routerOn[string](t, nowhere, pgrouter.Options{Schema: "By Hand"})
	require.NoError(t, r.Enqueue(ctx, "x", "p"))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Complete(ctx))
	require.NoError(t, r.Close(ctx))

	for _, v := range slices.Backward(migrationVersions(t)) {
		s, err := pgrouter.MigrationSQL("By Hand", v, true)
		require.NoError(t, err)
		applyScript(t, nowhere, s)
	}
	require.Empty(t, catalogOf(t, db, "By Hand"))
	got, err := pgrouter.SchemaVersion(ctx, nowhere, "By Hand")
	require.NoError(t, err)
	require.Zero(t, got)

	plain, err := pgrouter.MigrationSQL("", 1, false)
	require.NoError(t, err)
	require.NotContains(t, plain.SQL, `"`, "the default schema's script names nothing qualified")
	refused := []int{0, latest + 1}
	for v := 1; v < latest; v++ { // numbers skipped, if any: never another version's script
		if !slices.Contains(migrationVersions(t), v) {
			refused = append(refused, v)
		}
	}
	for _, v := range refused {
		_, err := pgrouter.MigrationSQL("", v, false)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "version %d", v)
	}
	_, err = pgrouter.MigrationSQL(`a"b`, 1, false)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
}
