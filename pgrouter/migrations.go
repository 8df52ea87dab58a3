package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
)

// MigrateOptions configure MigrateTo.
type MigrateOptions struct {
	// Schema is the schema to migrate, as Options.Schema names it (the
	// same rules; "" is the connection's search_path, as Migrate). The
	// schema must exist: MigrateTo does not create it (CREATE SCHEMA
	// needs a privilege on the database that an application's role often
	// lacks, and the schema's owner and grants are the operator's to
	// choose); it returns an error naming a schema that does not exist.
	Schema string
	// Version is the version to migrate to, up or down: 0 (the default)
	// means this module's latest (LatestVersion), as Migrate; VersionNone
	// removes every object of pgrouter's from the schema, its
	// leaserouter_migrations table last; any other must be one of this
	// module's versions (1 to LatestVersion).
	Version int
	// Down lets MigrateTo undo the versions recorded above Version
	// (VersionNone always does). Without it MigrateTo only goes up, and
	// versions recorded above Version are left alone, as Migrate leaves
	// a newer pgrouter's: code that pins a Version never removes a later
	// version's objects and data by running with a database a newer
	// release migrated.
	Down bool
}

// VersionNone is the MigrateOptions.Version of a schema holding nothing
// of pgrouter's: MigrateTo undoes every version applied.
const VersionNone = -1

// MigrateTo brings opts.Schema to opts.Version: up, and down only with
// opts.Down (or to VersionNone). Up, it is Migrate on that schema,
// stopping at that version (a version recorded above it is left alone,
// as Migrate leaves a newer pgrouter's). Down, it undoes each version
// recorded above opts.Version,
// the latest first, with that version's down migration
// (migrations/NNNN_name.down.sql, which MigrationSQL prints): the
// versions in a row in one transaction, each concurrent index step
// (versions 11, 15 to 18, 21 and 23 to 29) on its own, outside a transaction,
// as Migrate runs them up, and deletes its record. A down migration
// drops what its version added, with its data: version 1's the jobs
// table with every job, fence and token sequence (the next New starts the
// sequence again above the clock); 6's the paused queues; 7's History's
// counts; 10's and 12's the periodic jobs' records (their ticks may be
// taken again after an upgrade); 14's every job's kind and metadata (a
// Client's jobs become kind "", which a Client does not lease); 3's
// turns the state column back to numbers, 9's drops every job's
// WithTimeout, 19's every job's error history (Job.Errors; LastError
// stays). Nothing else of a job is lost. A version recorded above
// opts.Version that this module does not know (a newer pgrouter's) is an
// error, with nothing changed: undo it with that version.
//
// Everything Migrate's doc says of locks, waits, retries, timeouts,
// errors and ctx holds for MigrateTo, with one difference: its advisory
// locks are the schema's own (derived from its name), so Migrates of two
// schemas never wait for each other, and a Migrate of a version before
// schemas existed takes the default schema's alone. Processes running
// against the schema while it goes down will fail on what is dropped:
// stop them first. Errors: a nil db and an invalid opts wrap
// leaserouter.ErrInvalidOptions; a schema that does not exist is an
// error naming it; others wrap the driver's.
func MigrateTo(ctx context.Context, db *pgxpool.Pool, opts MigrateOptions) error {
	return migrate(ctx, db, "MigrateTo", opts)
}

// LatestVersion is this module's latest schema version: New needs every
// version up to it applied.
func LatestVersion() int {
	migs, err := migrations("")
	if err != nil || len(migs) == 0 {
		return 0
	}
	return migs[len(migs)-1].version
}

// Versions lists this module's schema versions in ascending order, the
// last LatestVersion, in a new slice each call (the caller may keep or
// change it); it needs no database and is safe for concurrent use. A
// number between two versions may have no migration (MigrationSQL
// refuses it with ErrInvalidOptions): run the scripts of the versions
// listed.
func Versions() []int {
	migs, err := migrations("")
	if err != nil {
		return nil
	}
	versions := make([]int, len(migs))
	for i, m := range migs {
		versions[i] = m.version
	}
	return versions
}

// target is opts.Version as a version number, checked against migs.
func (opts MigrateOptions) target(migs []migration) (int, error) {
	latest := migs[len(migs)-1].version
	switch {
	case opts.Version == 0:
		return latest, nil
	case opts.Version == VersionNone:
		return VersionNone, nil
	case opts.Version < 1 || opts.Version > latest:
		return 0, fmt.Errorf("%w: MigrateOptions.Version is %d, must be 1 to %d, 0 (the latest) or VersionNone", leaserouter.ErrInvalidOptions, opts.Version, latest)
	}
	return opts.Version, nil
}

// schemaExists returns an error naming schema if it is not "" and does
// not exist.
func schemaExists(ctx context.Context, db *pgxpool.Pool, call, schema string) error {
	if schema == "" {
		return nil
	}
	var ok bool
	if err := db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&ok); err != nil {
		return fmt.Errorf("pgrouter: %s: %w", call, err)
	}
	if !ok {
		return fmt.Errorf("pgrouter: %s: schema %q does not exist: create it first (CREATE SCHEMA %s)", call, schema, quoteSchema(schema))
	}
	return nil
}

// quoteSchema is schema as an SQL identifier.
func quoteSchema(schema string) string { return strings.TrimSuffix(qualify(schemaMarker, schema), ".") }

// schemaReady is New's check of db's schema: an error wrapping
// ErrSchemaOutdated unless every embedded migration's version is recorded
// in the schema's leaserouter_migrations (missing, the table or the
// schema has none; later ones, a newer pgrouter's, are accepted); then it
// raises the token sequence (raiseTokens).
func schemaReady(ctx context.Context, db *pgxpool.Pool, schema string, floor leaserouter.Token) error {
	migs, err := migrations(schema)
	if err != nil {
		return err
	}
	have, err := recordedVersions(ctx, db, schema)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined_table, invalid_schema_name
		have, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("pgrouter: New: read the schema version: %w", err)
	}
	var missing []int
	highest := 0
	for v := range have {
		highest = max(highest, v)
	}
	for _, m := range migs {
		if !have[m.version] {
			missing = append(missing, m.version)
		}
	}
	if len(missing) > 0 {
		where := "the database"
		if schema != "" {
			where = fmt.Sprintf("schema %q", schema)
		}
		return fmt.Errorf("%w: %s is at version %d, this module needs %d (versions missing: %v)", ErrSchemaOutdated, where, highest, migs[len(migs)-1].version, missing)
	}
	return raiseTokens(ctx, db, statementsFor(schema), floor)
}

// migration is one version: the step that applies it and the one that
// undoes it.
type migration struct {
	version  int
	up, down migrationStep
}

type migrationStep struct {
	version int
	name    string // the up file's name (what leaserouter_migrations records)
	sql     string // qualified for the schema
	plain   string // sql for the default schema (concurrent steps compare the index built with it)
	index   string // a concurrent step's index (concurrentMarker), or ""
	qindex  string // index, qualified for the schema
	drop    bool   // the concurrent step drops index rather than builds it
	undo    bool   // a down step
}

// concurrentMarker, a migration file's first line, makes it a concurrent
// index step, run outside a transaction (where CONCURRENTLY must), so
// that reads and writes of the table go on meanwhile; Migrate's advisory
// lock keeps other Migrates out. Its one statement is either
//
//   - CREATE INDEX CONCURRENTLY IF NOT EXISTS name ON ...: an index of
//     that name left INVALID by a failed or canceled build (Migrate's
//     own, killed midway, or one by hand), or of another definition, is
//     dropped (DROP INDEX CONCURRENTLY) and built again; once built, it
//     must be valid and as the statement says, or Migrate fails without
//     recording the migration; or
//   - DROP INDEX CONCURRENTLY IF EXISTS name: once it ran, no index of
//     that name may be left (an interrupted drop leaves it INVALID, and
//     the next Migrate drops it again).
//
// Every other migration runs in a transaction.
const concurrentMarker = "-- pgrouter:concurrent-index"

// concurrentIndex is the one statement a concurrentMarker migration holds:
// a build (the index's name in group 1) or a drop (group 2).
var concurrentIndex = regexp.MustCompile(`^(?:CREATE INDEX CONCURRENTLY IF NOT EXISTS ([a-z_][a-z0-9_]*) ON [^;]+|DROP INDEX CONCURRENTLY IF EXISTS ([a-z_][a-z0-9_]*));?$`)

// sqlStatement is text without its "--" comment lines, its whitespace
// runs made one space.
func sqlStatement(text string) string {
	var lines []string
	for l := range strings.Lines(text) {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	return strings.Join(strings.Fields(strings.Join(lines, " ")), " ")
}

// migrations reads the embedded migrations, qualified for schema, in
// version order: each version's up file NNNN_name.sql and its down file
// NNNN_name.down.sql, both required.
func migrations(schema string) ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var migs []migration
	for _, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		if strings.HasSuffix(base, ".down.sql") {
			continue
		}
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("pgrouter: migration %s: no version number", base)
		}
		m := migration{version: v}
		if m.up, err = readStep(n, base, v, schema); err != nil {
			return nil, err
		}
		if m.down, err = readStep(strings.TrimSuffix(n, ".sql")+".down.sql", base, v, schema); err != nil {
			return nil, err
		}
		m.down.undo = true
		migs = append(migs, m)
	}
	slices.SortFunc(migs, func(a, b migration) int { return a.version - b.version })
	return migs, nil
}

// readStep reads the migration file path, of version v recorded as name.
func readStep(path, name string, v int, schema string) (migrationStep, error) {
	b, err := migrationFiles.ReadFile(path)
	if err != nil {
		return migrationStep{}, fmt.Errorf("pgrouter: migration %s: %w", name, err)
	}
	text := string(b)
	step := migrationStep{version: v, name: name, sql: qualify(text, schema), plain: qualify(text, "")}
	if strings.HasPrefix(text, concurrentMarker+"\n") {
		m := concurrentIndex.FindStringSubmatch(sqlStatement(step.plain))
		if m == nil {
			return migrationStep{}, fmt.Errorf("pgrouter: migration %s: a concurrent index step holds one CREATE INDEX CONCURRENTLY IF NOT EXISTS or DROP INDEX CONCURRENTLY IF EXISTS", path)
		}
		step.index, step.drop = m[1]+m[2], m[2] != ""
		step.qindex = qualify(schemaMarker+step.index, schema)
	}
	return step, nil
}
