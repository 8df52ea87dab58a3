package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
)

// emptyDB is a database with nothing of pgrouter's (beside d's), its URL
// and a pool on it, dropped when t ends.
func emptyDB(t *testing.T, d db) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	name := d.pool.Config().ConnConfig.Database + "_empty" // unique: pgtest's name is
	_, err := d.pool.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	cfg := d.pool.Config().Copy()
	cfg.ConnConfig.Database = name
	empty, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		empty.Close()
		_, _ = d.pool.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return urlOf(empty), empty
}

// versionHeader starts each version's script in migrate --print's output.
var versionHeader = regexp.MustCompile(`(?m)^-- leaserouter \(pgrouter\) schema version (\d+), (up|down): `)

// applyPrinted runs migrate --print's output as psql would: each
// version's script in turn, a NO TRANSACTION one statement by statement,
// any other as one request (one transaction).
func applyPrinted(t *testing.T, pool *pgxpool.Pool, out string) {
	t.Helper()
	starts := versionHeader.FindAllStringIndex(out, -1)
	require.NotEmpty(t, starts)
	for i, s := range starts {
		end := len(out)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		script := out[s[0]:end]
		if !strings.Contains(script, "\n-- NO TRANSACTION") {
			_, err := pool.Exec(t.Context(), script)
			require.NoError(t, err, script)
			continue
		}
		for stmt := range strings.SplitSeq(script, ";\n") {
			if strings.Trim(regexp.MustCompile(`(?m)^--.*$`).ReplaceAllString(stmt, ""), " \n\t") == "" {
				continue
			}
			_, err := pool.Exec(t.Context(), stmt)
			require.NoError(t, err, stmt)
		}
	}
}

// TestMigratePrintAppliedByHandIsAccepted: migrate --print needs no
// database; its output, run as psql runs a file in a database with
// nothing of pgrouter's, makes a schema the other subcommands (New)
// accept and migrate finds up to date; --print --down's output, run the
// same way, leaves nothing, and each version's header names it, in the
// order to run them.
func TestMigratePrintAppliedByHandIsAccepted(t *testing.T) {
	d := newDB(t)
	url, empty := emptyDB(t, d)
	res := cli(t, "", "migrate", "--print")
	require.Equal(t, exitOK, res.code, res.stderr)
	latest := pgrouter.LatestVersion()
	require.Len(t, versionHeader.FindAllString(res.stdout, -1), len(pgrouter.Versions()))
	require.Contains(t, res.stdout, "-- NO TRANSACTION")
	require.NotContains(t, res.stdout, `"`+"public", "the default schema's names are unqualified")
	applyPrinted(t, empty, res.stdout)
	res = cli(t, url, "stats")
	require.Equal(t, exitOK, res.code, res.stderr)
	v, err := pgrouter.SchemaVersion(t.Context(), empty, "")
	require.NoError(t, err)
	require.Equal(t, latest, v)
	require.Contains(t, db{url: url}.ok(t, "migrate"), "up to date")

	res = cli(t, "", "migrate", "--print", "--down", "--to", "16")
	require.Equal(t, exitOK, res.code, res.stderr)
	var heads []string
	for _, m := range versionHeader.FindAllStringSubmatch(res.stdout, -1) {
		heads = append(heads, m[1]+" "+m[2])
	}
	var want []string
	for _, v := range slices.Backward(pgrouter.Versions()) {
		if v > 16 {
			want = append(want, fmt.Sprint(v, " down"))
		}
	}
	require.Equal(t, want, heads, "from the latest version down to 17")
	res = cli(t, "", "migrate", "--print", "--down")
	require.Equal(t, exitOK, res.code, res.stderr)
	applyPrinted(t, empty, res.stdout)
	var left int
	require.NoError(t, empty.QueryRow(t.Context(), `SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace`).Scan(&left))
	require.Zero(t, left, "tables, indexes or sequences left")

	var scripts []pgrouter.MigrationScript
	out := d.ok(t, "migrate", "--print", "--from", "17", "--json", "--schema", "jobs")
	require.NoError(t, json.NewDecoder(bytes.NewReader([]byte(out))).Decode(&scripts))
	require.Len(t, scripts, len(pgrouter.Versions())-16)
	require.Equal(t, 17, scripts[0].Version)
	require.True(t, scripts[0].NoTransaction)
	require.Contains(t, scripts[0].SQL, `"jobs".leaserouter_jobs`)
}

// TestMigrateSchemaAndVersions: --schema (or $LEASEROUTER_SCHEMA) names
// the schema every subcommand works in; migrate --to goes to a version,
// down only with --down; a schema not migrated is refused with the
// command that migrates it.
func TestMigrateSchemaAndVersions(t *testing.T) {
	d := newDB(t)
	_, err := d.pool.Exec(t.Context(), `CREATE SCHEMA "Team A"`)
	require.NoError(t, err)
	res := cli(t, d.url, "stats", "--schema", "Team A")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, `(run: leaserouter migrate --schema 'Team A')`)
	require.Contains(t, d.ok(t, "migrate", "--schema", "Team A"), "up to date")
	v, err := pgrouter.SchemaVersion(t.Context(), d.pool, "Team A")
	require.NoError(t, err)
	require.Equal(t, pgrouter.LatestVersion(), v)

	res = cli(t, d.url, "migrate", "--schema", "Team A", "--to", "10")
	require.Equal(t, exitUsage, res.code, res.stderr)
	require.Contains(t, res.stderr, "--down")
	require.Contains(t, d.ok(t, "migrate", "--schema", "Team A", "--to", "10", "--down"), "at version 10")
	v, err = pgrouter.SchemaVersion(t.Context(), d.pool, "Team A")
	require.NoError(t, err)
	require.Equal(t, 10, v)

	var out bytes.Buffer
	env := func(k string) string {
		return map[string]string{envURL: d.url, envSchema: "Team A"}[k]
	}
	require.Equal(t, exitOK, run(t.Context(), []string{"migrate"}, env, &out, &out), out.String())
	require.Equal(t, exitOK, run(t.Context(), []string{"pause", "--create", "--queue", "q"}, env, &out, &out), out.String())
	r, err := pgrouter.New[json.RawMessage](t.Context(), d.pool, pgrouter.Options{Queue: "q", Schema: "Team A"})
	require.NoError(t, err)
	qs, err := r.Queues(t.Context())
	require.NoError(t, err)
	require.NoError(t, r.Close(t.Context()))
	require.Len(t, qs, 1)
	require.True(t, qs[0].Paused, "paused in Team A")
	pub, err := pgrouter.New[json.RawMessage](t.Context(), d.pool, pgrouter.Options{Queue: "q"})
	require.NoError(t, err)
	qs, err = pub.Queues(t.Context())
	require.NoError(t, err)
	require.NoError(t, pub.Close(t.Context()))
	require.Empty(t, qs, "public untouched")

	require.Contains(t, d.ok(t, "migrate", "--schema", "Team A", "--to", "none", "--down"), "at version none")
	v, err = pgrouter.SchemaVersion(t.Context(), d.pool, "Team A")
	require.NoError(t, err)
	require.Zero(t, v)
	res = cli(t, d.url, "migrate", "--schema", "absent")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, `schema "absent" does not exist`)
}
