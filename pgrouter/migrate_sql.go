package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
)

// MigrationScript is the SQL of one schema version, up or down, as
// MigrationSQL renders it for a tool that runs SQL files (goose,
// golang-migrate, atlas, psql).
type MigrationScript struct {
	// Version is the schema version the script applies (up) or undoes
	// (down).
	Version int
	// Name is the version's name, as leaserouter_migrations records it:
	// "0011_id_prefix.sql".
	Name string
	// Down tells an undoing script.
	Down bool
	// NoTransaction: the script must run outside a transaction, each of
	// its statements on its own (CREATE or DROP INDEX CONCURRENTLY cannot
	// run in a transaction block, nor in a multi-statement request, which
	// PostgreSQL runs as one). Every other script runs in one transaction,
	// as one request or statement by statement.
	NoTransaction bool
	// SQL is the script: a comment naming the version (and saying
	// NoTransaction), the statements of the version's migration, qualified
	// for the schema, then the statement recording it in
	// leaserouter_migrations (up: an INSERT, after version 1 creates the
	// table; down: a DELETE, and version 1's drops the table), so that New
	// accepts the schema once every version up to LatestVersion has run.
	SQL string
}

// MigrationSQL returns the script of version, up or down (down undoes
// it, going to version-1), qualified for schema (as Options.Schema; ""
// names every object unqualified, for the connection's search_path):
// what MigrateTo runs for that version, plus its record, for users who
// apply migrations with their own tool. A schema-qualified script does
// not create the schema. Run the scripts in order: up, of Versions from
// 1 to LatestVersion; down, from the version the schema is at, down. Unlike
// MigrateTo, a script takes no lock and does not retry on a
// lock_timeout, and a NoTransaction build that fails leaves an INVALID
// index that the script, run again, keeps (IF NOT EXISTS): drop it
// first (DROP INDEX CONCURRENTLY). Errors: an invalid schema name or a
// version not in 1 to LatestVersion, or not one of the module's, wraps
// leaserouter.ErrInvalidOptions.
func MigrationSQL(schema string, version int, down bool) (MigrationScript, error) {
	if err := checkSchema("schema", schema); err != nil {
		return MigrationScript{}, err
	}
	migs, err := migrations(schema)
	if err != nil {
		return MigrationScript{}, err
	}
	if version < 1 || version > migs[len(migs)-1].version {
		return MigrationScript{}, fmt.Errorf("%w: version %d, must be 1 to %d", leaserouter.ErrInvalidOptions, version, migs[len(migs)-1].version)
	}
	i := slices.IndexFunc(migs, func(m migration) bool { return m.version == version })
	if i < 0 { // a number skipped: never the script of another version
		return MigrationScript{}, fmt.Errorf("%w: version %d: no migration of that number", leaserouter.ErrInvalidOptions, version)
	}
	m := migs[i]
	s, dir := m.up, "up"
	if down {
		s, dir = m.down, "down"
	}
	var b strings.Builder
	where := ""
	if schema != "" {
		where = " in schema " + quoteSchema(schema)
	}
	fmt.Fprintf(&b, "-- leaserouter (pgrouter) schema version %d, %s: %s%s\n", version, dir, s.name, where)
	if s.index != "" {
		b.WriteString("-- NO TRANSACTION: run outside a transaction, each statement on its own (CREATE or DROP INDEX CONCURRENTLY).\n")
	}
	b.WriteString(strings.TrimRight(s.sql, "\n"))
	b.WriteString("\n\n")
	switch {
	case !down:
		if version == 1 {
			b.WriteString(qualify(createMigrationsTable, schema) + ";\n")
		}
		fmt.Fprintf(&b, "%s;\n", qualify(fmt.Sprintf("INSERT INTO /*schema*/leaserouter_migrations (version, name) VALUES (%d, '%s') ON CONFLICT (version) DO NOTHING", version, s.name), schema))
	case version == 1:
		fmt.Fprintf(&b, "%s;\n%s;\n", qualify("DELETE FROM /*schema*/leaserouter_migrations WHERE version = 1", schema), qualify(dropMigrationsTable, schema))
	default:
		fmt.Fprintf(&b, "%s;\n", qualify(fmt.Sprintf("DELETE FROM /*schema*/leaserouter_migrations WHERE version = %d", version), schema))
	}
	return MigrationScript{Version: version, Name: s.name, Down: down, NoTransaction: s.index != "", SQL: b.String()}, nil
}

// SchemaVersion is the highest version recorded in schema's
// leaserouter_migrations (as Options.Schema names it), or 0 when the
// schema has no such table or does not exist. Errors: an invalid schema
// name wraps leaserouter.ErrInvalidOptions; others wrap the driver's.
func SchemaVersion(ctx context.Context, db *pgxpool.Pool, schema string) (int, error) {
	if err := checkSchema("schema", schema); err != nil {
		return 0, err
	}
	if db == nil {
		return 0, fmt.Errorf("%w: nil pool", leaserouter.ErrInvalidOptions)
	}
	have, err := recordedVersions(orBackground(ctx), db, schema)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgrouter: SchemaVersion: %w", err)
	}
	v := 0
	for h := range have {
		v = max(v, h)
	}
	return v, nil
}
