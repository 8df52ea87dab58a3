package pgrouter

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
)

//go:embed migrations/*.sql
var migrations embed.FS

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

// Migrate brings the database's pgrouter schema to this module's version:
// it applies, in order, the embedded SQL migrations
// (migrations/NNNN_name.sql) not yet recorded in the table
// leaserouter_migrations, one missing below the highest recorded
// included (an error for versions 1 to 3, which cannot be applied over
// later ones): those in a row in one transaction, and each index
// build or drop (schema versions 11, 15, 16, 17 and 18) on its own,
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
	if db == nil {
		return fmt.Errorf("pgrouter: Migrate: nil pool")
	}
	ctx = orBackground(ctx)
	steps, err := migrationSteps()
	if err != nil {
		return err
	}
	backoff := 50 * time.Millisecond
	for try := 1; ; try++ {
		err := migrateOnce(ctx, db, steps)
		var pgErr *pgconn.PgError
		if try == migrateTries || !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgrouter: Migrate: %w (after %d tries; the last: %w)", ctx.Err(), try, err)
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

// migrateOnce is one try of Migrate, on one connection holding
// migrateSessionLock for the session (lockMigrate), so that it covers both
// the transactions and the concurrent index builds, which run outside one.
// The pending migrations up to the next concurrent one are applied in one
// transaction holding migrateLock, every statement with lock_timeout
// migrateLockTimeout (its wait for migrateLock included); a
// concurrent one is built (buildConcurrently) and then recorded; and so on.
func migrateOnce(ctx context.Context, db *pgxpool.Pool, steps []migrationStep) error {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgrouter: Migrate: %w", err)
	}
	defer conn.Release()
	if err := lockMigrate(ctx, conn); err != nil {
		return err
	}
	defer unlockMigrate(ctx, conn)
	for {
		var build *migrationStep
		err := pgx.BeginTxFunc(ctx, conn, readCommitted, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", migrateLockTimeout.Milliseconds())); err != nil {
				return fmt.Errorf("pgrouter: Migrate: %w", err)
			}
			// Bounded by the lock_timeout: an older version's Migrate holds
			// it for its whole transaction.
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
				return fmt.Errorf("pgrouter: Migrate: lock: %w", err)
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS leaserouter_migrations (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
				return fmt.Errorf("pgrouter: Migrate: %w", err)
			}
			have, err := recordedVersions(ctx, tx)
			if err != nil {
				return fmt.Errorf("pgrouter: Migrate: %w", err)
			}
			highest := 0
			for v := range have {
				highest = max(highest, v)
			}
			for i, s := range steps {
				if have[s.version] {
					continue
				}
				if s.version < migrateReapplyFrom && s.version < highest {
					return fmt.Errorf("pgrouter: Migrate: the database records version %d but not %d, which cannot be applied over later ones: a schema not made by Migrate?", highest, s.version)
				}
				if s.index != "" { // the ones before it commit first
					build = &steps[i]
					return nil
				}
				if _, err := tx.Exec(ctx, s.sql); err != nil {
					return fmt.Errorf("pgrouter: Migrate: migration %s: %w", s.name, err)
				}
				if err := recordMigration(ctx, tx, s); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || build == nil {
			return err
		}
		if err := buildConcurrently(ctx, conn, *build); err != nil {
			return err
		}
		if err := recordMigration(ctx, conn, *build); err != nil {
			return err
		}
	}
}

// migrateReapplyFrom: every migration from this version on is written to
// be applied over later ones (IF NOT EXISTS, CREATE OR REPLACE, a
// concurrent build's checks), so that Migrate applies a version missing
// below the highest recorded (deleted by hand, or recorded out of order);
// one missing before it, with later ones recorded, is an error.
const migrateReapplyFrom = 4

// recordedVersions reads the versions recorded in leaserouter_migrations.
func recordedVersions(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[int]bool, error) {
	rows, err := db.Query(ctx, "SELECT version FROM leaserouter_migrations")
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

// recordMigration records s as applied.
func recordMigration(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, s migrationStep) error {
	if _, err := db.Exec(ctx, "INSERT INTO leaserouter_migrations (version, name) VALUES ($1, $2)", s.version, s.name); err != nil {
		return fmt.Errorf("pgrouter: Migrate: %w", err)
	}
	return nil
}

// lockMigrate takes migrateSessionLock for conn's session, waiting
// for it without a bound but ctx's. It tries for it again and again
// (every 10ms, doubling up to 1s) rather than wait in pg_advisory_lock: a
// statement waiting there has a snapshot, which the concurrent index
// build of the Migrate holding the lock waits to end (CREATE INDEX
// CONCURRENTLY waits out older snapshots), a deadlock.
func lockMigrate(ctx context.Context, conn *pgxpool.Conn) error {
	wait := 10 * time.Millisecond
	for {
		var locked bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(migrateSessionLock)).Scan(&locked); err != nil {
			return fmt.Errorf("pgrouter: Migrate: lock: %w", err)
		}
		if locked {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgrouter: Migrate: lock: %w", ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// unlockMigrate gives up Migrate's session lock held by conn; when it
// cannot (ctx ended, the connection broke), it closes the connection
// instead, whose end releases the lock, rather than return to the pool a
// connection that holds it.
func unlockMigrate(ctx context.Context, conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(migrateSessionLock)); err != nil {
		_ = conn.Hijack().Close(ctx)
	}
}

// ErrSchemaOutdated is what New returns (wrapped, naming the versions)
// when the database's pgrouter schema is older than this module's latest
// migration, misses one of its migrations, or is missing: run Migrate
// first.
var ErrSchemaOutdated = errors.New("pgrouter: database schema older than this module's (run Migrate)")

// schemaReady is New's check of db's schema: an error wrapping
// ErrSchemaOutdated unless every embedded migration's version is recorded
// in leaserouter_migrations (missing, the table has none; later ones, a
// newer pgrouter's, are accepted); then it raises the token sequence
// (raiseTokens).
func schemaReady(ctx context.Context, db *pgxpool.Pool, floor leaserouter.Token) error {
	steps, err := migrationSteps()
	if err != nil {
		return err
	}
	have, err := recordedVersions(ctx, db)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
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
	for _, s := range steps {
		if !have[s.version] {
			missing = append(missing, s.version)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the database is at version %d, this module needs %d (versions missing: %v)", ErrSchemaOutdated, highest, steps[len(steps)-1].version, missing)
	}
	return raiseTokens(ctx, db, floor)
}

type migrationStep struct {
	version int
	name    string
	sql     string
	index   string // a concurrent step's index (concurrentMarker), or ""
	drop    bool   // the concurrent step drops index rather than builds it
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

// migrationSteps reads the embedded migrations in version order.
func migrationSteps() ([]migrationStep, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var steps []migrationStep
	for _, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("pgrouter: migration %s: no version number", base)
		}
		b, err := migrations.ReadFile(n)
		if err != nil {
			return nil, err
		}
		step := migrationStep{version: v, name: base, sql: string(b)}
		if strings.HasPrefix(step.sql, concurrentMarker+"\n") {
			m := concurrentIndex.FindStringSubmatch(sqlStatement(step.sql))
			if m == nil {
				return nil, fmt.Errorf("pgrouter: migration %s: a concurrent index step holds one CREATE INDEX CONCURRENTLY IF NOT EXISTS or DROP INDEX CONCURRENTLY IF EXISTS", base)
			}
			step.index, step.drop = m[1]+m[2], m[2] != ""
		}
		steps = append(steps, step)
	}
	slices.SortFunc(steps, func(a, b migrationStep) int { return a.version - b.version })
	return steps, nil
}
