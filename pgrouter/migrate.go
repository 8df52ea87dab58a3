package pgrouter

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
)

// The migrations: migrations/NNNN_name.sql applies version NNNN and
// migrations/NNNN_name.down.sql undoes it (both required; never renumber
// one). Names of pgrouter's objects are written after /*schema*/, as in
// sql/ (schemaMarker, schema.go), and qualified when a schema's
// migrations are read (migrations, migrations.go); nothing records a
// migration's text, so a file's edit (a marker added) never makes an
// applied version run again.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate's advisory lock keys. migrateSessionLock ("leaserMg" in
// ASCII), taken for a session (polled, lockMigrate), keeps a Migrate to
// itself from start to end, its concurrent index builds included.
// migrateLock ("leaserou"), the key Migrates before the concurrent builds
// took for their one transaction (pg_advisory_xact_lock), is taken the
// same way by each transaction of a Migrate, and never kept while it
// builds: a Migrate of such a version, run during a rolling upgrade,
// waits for it inside its transaction, with a snapshot that the build
// waits out; it gets the key, finds the schema at or past its version,
// and commits.
const (
	migrateLock        = 0x6c65617365726f75
	migrateSessionLock = 0x6c65617365724d67
)

// Migrate brings the database's pgrouter schema to this module's version
// (LatestVersion), in the default schema (the connections' search_path;
// MigrateTo migrates another, or to another version, down too):
// it applies, in order, the embedded SQL migrations
// (migrations/NNNN_name.sql) not yet recorded in the table
// leaserouter_migrations, one missing below the highest recorded
// included (an error for versions 1 to 3, which cannot be applied over
// later ones): those in a row in one transaction, and each index
// build or drop (schema versions 11, 15 to 18, 21 and 23 to 29) on its own,
// outside a transaction (CREATE or DROP INDEX CONCURRENTLY), after the ones before it are
// committed. It is idempotent and safe when many processes run it at
// once (they wait on an advisory lock, polled every 10ms to 1s, on one
// connection of db each; the later ones find nothing to do). A database
// migrated by a newer pgrouter is left alone. Errors wrap the driver's;
// a failed transaction changes nothing, and a failed or interrupted index
// build (ctx ended, the process killed) leaves an INVALID index, which
// the next Migrate drops and builds again, as it does an index of that
// name built otherwise. A Migrate of a version before the concurrent
// builds, run meanwhile (a rolling upgrade), waits for this one's
// transactions only, not its builds, and finds nothing to do. A nil db
// is an error. Its transactions are READ COMMITTED whatever the
// session's default_transaction_isolation (unlike New, it accepts a pool
// whose sessions default to another).
//
// Migrate never stalls the queue behind a long transaction: a migration
// that alters the jobs table needs it to itself, and while it waits for
// that, every other statement on the table (claims, heartbeats,
// completions) would queue behind it. So it waits for a moment when no
// transaction holds the tables: each try gives up its locks after 100ms
// (SET LOCAL lock_timeout; other statements are held up at most that
// long), then tries again after 50ms, doubling up to 2s, up to 30 tries
// (about a minute): then it returns the last try's error, wrapping the
// driver's lock_not_available (SQLSTATE 55P03); ctx.Err() (wrapped) if
// ctx ends while it waits. A transaction open on the jobs table for that
// long (a caller's, after CompleteTx, say) makes it fail: run it again
// once that is over. An index build holds up no statement: writes to the
// table go on while it reads it (seconds at millions of jobs); it waits,
// bounded only by ctx, for the transactions open when it starts, any
// table's (as CREATE INDEX CONCURRENTLY does), and may take twice as long
// as a plain build: the session's statement_timeout and lock_timeout (a
// pool's settings, say) are lifted for it and put back after.
func Migrate(ctx context.Context, db *pgxpool.Pool) error {
	return migrate(ctx, db, "Migrate", MigrateOptions{})
}

// migrate is Migrate and MigrateTo, reporting errors as call's.
func migrate(ctx context.Context, db *pgxpool.Pool, call string, opts MigrateOptions) error {
	if db == nil {
		return fmt.Errorf("%w: pgrouter: %s: nil pool", leaserouter.ErrInvalidOptions, call)
	}
	ctx = orBackground(ctx)
	if err := checkSchema("MigrateOptions.Schema", opts.Schema); err != nil {
		return err
	}
	migs, err := migrations(opts.Schema)
	if err != nil {
		return err
	}
	target, err := opts.target(migs)
	if err != nil {
		return err
	}
	if err := schemaExists(ctx, db, call, opts.Schema); err != nil {
		return err
	}
	backoff := 50 * time.Millisecond
	for try := 1; ; try++ {
		err := migrateOnce(ctx, db, call, opts.Schema, target, opts.Down || target == VersionNone, migs)
		var pgErr *pgconn.PgError
		if try == migrateTries || !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgrouter: %s: %w (after %d tries; the last: %w)", call, ctx.Err(), try, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// migrateLockTimeout bounds each of Migrate's waits for a lock;
// migrateTries bounds its tries (see Migrate).
const (
	migrateLockTimeout = 100 * time.Millisecond
	migrateTries       = 30
)

// migrateOnce is one try of Migrate (or MigrateTo: to target, going down
// too if down), on one connection holding the schema's session lock
// (lockMigrate), so that it covers both the transactions and the
// concurrent index steps, which run outside one. First the versions
// recorded above target are undone, the latest first, then those missing
// up to target are applied, in order: the steps up to the next
// concurrent one in one transaction holding the schema's transaction
// lock, every statement with lock_timeout migrateLockTimeout (its wait
// for that lock included); a concurrent one is run (buildConcurrently)
// and then recorded (or its record deleted); and so on.
func migrateOnce(ctx context.Context, db *pgxpool.Pool, call, schema string, target int, down bool, migs []migration) error {
	fail := func(err error) error { return fmt.Errorf("pgrouter: %s: %w", call, err) }
	xactLock, sessionLock := migrateLocks(schema)
	conn, err := db.Acquire(ctx)
	if err != nil {
		return fail(err)
	}
	defer conn.Release()
	if err := lockMigrate(ctx, conn, call, sessionLock); err != nil {
		return err
	}
	defer unlockMigrate(ctx, conn, sessionLock)
	for {
		var concurrent *migrationStep
		err := pgx.BeginTxFunc(ctx, conn, readCommitted, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", migrateLockTimeout.Milliseconds())); err != nil {
				return fail(err)
			}
			// Bounded by the lock_timeout: an older version's Migrate holds
			// it for its whole transaction.
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", xactLock); err != nil {
				return fail(fmt.Errorf("lock: %w", err))
			}
			if _, err := tx.Exec(ctx, qualify(createMigrationsTable, schema)); err != nil {
				return fail(err)
			}
			have, err := recordedVersions(ctx, tx, schema)
			if err != nil {
				return fail(err)
			}
			if down {
				for _, v := range slices.Backward(slices.Sorted(maps.Keys(have))) {
					if v <= target {
						break
					}
					i := slices.IndexFunc(migs, func(m migration) bool { return m.version == v })
					if i < 0 {
						return fail(fmt.Errorf("the database records version %d, unknown to this module (a newer pgrouter's): migrate it down with that version", v))
					}
					s := &migs[i].down
					if s.index != "" { // the ones before it commit first
						concurrent = s
						return nil
					}
					if _, err := tx.Exec(ctx, s.sql); err != nil {
						return fail(fmt.Errorf("migration %s down: %w", s.name, err))
					}
					if err := unrecordMigration(ctx, tx, call, schema, *s); err != nil {
						return err
					}
					delete(have, v)
				}
			}
			highest := 0
			for v := range have {
				highest = max(highest, v)
			}
			for i := range migs {
				s := &migs[i].up
				if have[s.version] || s.version > target {
					continue
				}
				if s.version < migrateReapplyFrom && s.version < highest {
					return fail(fmt.Errorf("the database records version %d but not %d, which cannot be applied over later ones: a schema not made by Migrate?", highest, s.version))
				}
				if s.index != "" { // the ones before it commit first
					concurrent = s
					return nil
				}
				if _, err := tx.Exec(ctx, s.sql); err != nil {
					return fail(fmt.Errorf("migration %s: %w", s.name, err))
				}
				if err := recordMigration(ctx, tx, call, schema, *s); err != nil {
					return err
				}
				have[s.version] = true
			}
			if target == VersionNone && len(have) == 0 {
				if _, err := tx.Exec(ctx, qualify(dropMigrationsTable, schema)); err != nil {
					return fail(err)
				}
			}
			return nil
		})
		if err != nil || concurrent == nil {
			return err
		}
		// Going up, the version is recorded once its index is built;
		// going down, its record goes first: a step interrupted half-way
		// (a ctx ended, a build or drop that failed) then leaves the
		// version unrecorded, and the next Migrate applies it again
		// (every step can be applied over itself), where a record kept
		// would have left a half-undone version counted as applied.
		if concurrent.undo {
			if err := unrecordMigration(ctx, conn, call, schema, *concurrent); err != nil {
				return err
			}
		}
		if err := buildConcurrently(ctx, conn, call, *concurrent); err != nil {
			return err
		}
		if !concurrent.undo {
			if err := recordMigration(ctx, conn, call, schema, *concurrent); err != nil {
				return err
			}
		}
	}
}

// migrateReapplyFrom: every migration from this version on is written to
// be applied over later ones (IF NOT EXISTS, CREATE OR REPLACE, a
// concurrent build's checks), so that Migrate applies a version missing
// below the highest recorded (deleted by hand, or recorded out of order);
// one missing before it, with later ones recorded, is an error.
const migrateReapplyFrom = 4

// createMigrationsTable and dropMigrationsTable make and remove the
// table recording the versions applied (schemaMarker: see qualify).
const (
	createMigrationsTable = `CREATE TABLE IF NOT EXISTS /*schema*/leaserouter_migrations (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`
	dropMigrationsTable = `DROP TABLE IF EXISTS /*schema*/leaserouter_migrations`
)

// recordedVersions reads the versions recorded in schema's
// leaserouter_migrations.
func recordedVersions(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string) (map[int]bool, error) {
	rows, err := db.Query(ctx, qualify("SELECT version FROM /*schema*/leaserouter_migrations", schema))
	if err != nil {
		return nil, err
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	have := make(map[int]bool, len(vs))
	for _, v := range vs {
		have[int(v)] = true
	}
	return have, nil
}

// execer is a connection or a transaction, for a statement that returns
// no rows.
type execer interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

// recordMigration records s as applied in schema.
func recordMigration(ctx context.Context, db execer, call, schema string, s migrationStep) error {
	if _, err := db.Exec(ctx, qualify("INSERT INTO /*schema*/leaserouter_migrations (version, name) VALUES ($1, $2)", schema), s.version, s.name); err != nil {
		return fmt.Errorf("pgrouter: %s: %w", call, err)
	}
	return nil
}

// unrecordMigration deletes the record of s's version from schema.
func unrecordMigration(ctx context.Context, db execer, call, schema string, s migrationStep) error {
	if _, err := db.Exec(ctx, qualify("DELETE FROM /*schema*/leaserouter_migrations WHERE version = $1", schema), s.version); err != nil {
		return fmt.Errorf("pgrouter: %s: %w", call, err)
	}
	return nil
}

// lockMigrate takes the session lock key for conn's session, waiting
// for it without a bound but ctx's. It tries for it again and again
// (every 10ms, doubling up to 1s) rather than wait in pg_advisory_lock: a
// statement waiting there has a snapshot, which the concurrent index
// build of the Migrate holding the lock waits to end (CREATE INDEX
// CONCURRENTLY waits out older snapshots), a deadlock.
func lockMigrate(ctx context.Context, conn *pgxpool.Conn, call string, key int64) error {
	wait := 10 * time.Millisecond
	for {
		var locked bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&locked); err != nil {
			return fmt.Errorf("pgrouter: %s: lock: %w", call, err)
		}
		if locked {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgrouter: %s: lock: %w", call, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// unlockMigrate gives up the session lock key held by conn; when it
// cannot (ctx ended, the connection broke), it closes the connection
// instead, whose end releases the lock, rather than return to the pool a
// connection that holds it.
func unlockMigrate(ctx context.Context, conn *pgxpool.Conn, key int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
		_ = conn.Hijack().Close(ctx)
	}
}

// ErrSchemaOutdated is what New returns (wrapped, naming the versions)
// when the database's pgrouter schema is older than this module's latest
// migration, misses one of its migrations, or is missing: run Migrate
// first.
var ErrSchemaOutdated = errors.New("pgrouter: database schema older than this module's (run Migrate)")
