package pgrouter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// buildConcurrently applies the concurrent index step s (concurrentMarker)
// on conn, outside a transaction, under Migrate's session lock. A build:
// an index of s's name that is invalid or not as s defines it is dropped
// first, then s runs, and the index it leaves must be valid and as s
// defines it. A drop: s runs, and no index of its name may be left.
// The build waits for the transactions open on the table without holding
// up their statements (its SHARE UPDATE EXCLUSIVE lock lets writes go on),
// so no timeout bounds it; ctx does: the session's statement_timeout,
// lock_timeout and (PostgreSQL 17+) transaction_timeout, a pool's
// settings, say, are lifted for the drop and build and put back after.
func buildConcurrently(ctx context.Context, conn *pgxpool.Conn, call string, s migrationStep) (err error) {
	name := s.name
	if s.undo {
		name += " down"
	}
	fail := func(err error) error { return fmt.Errorf("pgrouter: %s: migration %s: %w", call, name, err) }
	restore, err := liftTimeouts(ctx, conn)
	if err != nil {
		return fail(err)
	}
	defer func() {
		if rerr := restore(); rerr != nil && err == nil {
			err = fail(rerr)
		}
	}()
	if s.drop {
		if _, err := conn.Exec(ctx, s.sql); err != nil {
			return fail(err)
		}
		if _, def, err := indexAsDefined(ctx, conn, s); err != nil || def != "" {
			return fail(cmp.Or(err, fmt.Errorf("index %s left after its drop: %s", s.index, def)))
		}
		return nil
	}
	ok, def, err := indexAsDefined(ctx, conn, s)
	if err != nil {
		return fail(err)
	}
	if def != "" && !ok {
		if _, err := conn.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+s.qindex); err != nil {
			return fail(fmt.Errorf("drop %s (invalid or %s): %w", s.index, def, err))
		}
	}
	if _, err := conn.Exec(ctx, s.sql); err != nil {
		return fail(err)
	}
	if ok, def, err = indexAsDefined(ctx, conn, s); err != nil {
		return fail(err)
	}
	if !ok {
		return fail(fmt.Errorf("index %s built invalid or as %q", s.index, def))
	}
	return nil
}

// indexAsDefined reads the index s builds (in its schema): def is its
// definition (pg_get_indexdef; "" if there is no such index), ok whether
// it is valid and defined as s's statement for the default schema says
// (pg_get_indexdef writes the table's schema before its name, and before
// a type's where the schema is not on the search_path, and "USING
// btree").
func indexAsDefined(ctx context.Context, conn *pgxpool.Conn, s migrationStep) (ok bool, def string, err error) {
	var valid bool
	var schema string
	err = conn.QueryRow(ctx, `SELECT i.indisvalid AND i.indisready AND i.indislive, pg_get_indexdef(i.indexrelid), quote_ident(n.nspname)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE i.indexrelid = to_regclass($1)`, s.qindex).Scan(&valid, &def, &schema)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read index %s: %w", s.index, err)
	}
	got := strings.ReplaceAll(strings.Replace(def, " USING btree ", " ", 1), schema+".", "")
	want := strings.TrimSuffix(strings.Replace(sqlStatement(s.plain), "CONCURRENTLY IF NOT EXISTS ", "", 1), ";")
	return valid && got == want, def, nil
}

// liftTimeouts sets conn's session statement_timeout, lock_timeout and
// (PostgreSQL 17+) transaction_timeout to 0; restore puts back the values
// they had. When it cannot (ctx ended, the connection broke), restore
// closes the connection instead, rather than give the pool back a
// session without its timeouts (its end releases Migrate's lock too).
func liftTimeouts(ctx context.Context, conn *pgxpool.Conn) (restore func() error, err error) {
	var stmt, lock string
	var txn *string // NULL before PostgreSQL 17
	if err := conn.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),
			current_setting('transaction_timeout', true)`).Scan(&stmt, &lock, &txn); err != nil {
		return nil, fmt.Errorf("read the session's timeouts: %w", err)
	}
	set := func(ctx context.Context, stmt, lock string, txn *string) error {
		_, err := conn.Exec(ctx, `SELECT set_config('statement_timeout', $1, false), set_config('lock_timeout', $2, false),
			CASE WHEN $3::text IS NOT NULL THEN set_config('transaction_timeout', $3, false) END`, stmt, lock, txn)
		return err
	}
	zero := "0"
	var zeroTxn *string
	if txn != nil {
		zeroTxn = &zero
	}
	restore = func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := set(ctx, stmt, lock, txn); err != nil {
			_ = conn.Conn().Close(ctx) // the pool drops a closed connection
			return fmt.Errorf("restore the session's timeouts: %w", err)
		}
		return nil
	}
	if err := set(ctx, zero, zero, zeroTxn); err != nil {
		_ = restore()
		return nil, fmt.Errorf("lift the session's timeouts: %w", err)
	}
	return restore, nil
}
