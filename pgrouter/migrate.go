package pgrouter

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrateLock is the advisory lock key Migrate holds while it migrates
// ("leaserou" in ASCII), so that many processes may run it at once.
const migrateLock = 0x6c65617365726f75

// Migrate brings the database's pgrouter schema to this module's version:
// it applies, in order and each in the one transaction, the embedded SQL
// migrations (migrations/NNNN_name.sql) not yet recorded in the table
// leaserouter_migrations. It is idempotent and safe when many processes
// run it at once (they wait on an advisory lock; the later ones find
// nothing to do). A database migrated by a newer pgrouter is left alone.
// Errors wrap the driver's; a failed migration changes nothing. A nil db
// is an error.
func Migrate(ctx context.Context, db *pgxpool.Pool) error {
	if db == nil {
		return fmt.Errorf("pgrouter: Migrate: nil pool")
	}
	ctx = orBackground(ctx)
	steps, err := migrationSteps()
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
			return fmt.Errorf("pgrouter: Migrate: lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS leaserouter_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
			return fmt.Errorf("pgrouter: Migrate: %w", err)
		}
		var have int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM leaserouter_migrations").Scan(&have); err != nil {
			return fmt.Errorf("pgrouter: Migrate: %w", err)
		}
		for _, s := range steps {
			if s.version <= have {
				continue
			}
			if _, err := tx.Exec(ctx, s.sql); err != nil {
				return fmt.Errorf("pgrouter: Migrate: migration %s: %w", s.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO leaserouter_migrations (version, name) VALUES ($1, $2)", s.version, s.name); err != nil {
				return fmt.Errorf("pgrouter: Migrate: %w", err)
			}
		}
		return nil
	})
}

type migrationStep struct {
	version int
	name    string
	sql     string
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
		steps = append(steps, migrationStep{version: v, name: base, sql: string(b)})
	}
	slices.SortFunc(steps, func(a, b migrationStep) int { return a.version - b.version })
	return steps, nil
}

// orBackground treats a nil ctx as context.Background(), as every call does.
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}
