package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// buildConcurrently applies the concurrent index build s (concurrentMarker)
// on conn, outside a transaction, under Migrate's session lock: an index
// of s's name that is invalid or not as s defines it is dropped first,
// then s runs, and the index it leaves must be valid and as s defines it.
// The build waits for the transactions open on the table without holding
// up their statements (its SHARE UPDATE EXCLUSIVE lock lets writes go on),
// so no lock_timeout bounds it; ctx does.
func buildConcurrently(ctx context.Context, conn *pgxpool.Conn, s migrationStep) error {
	fail := func(err error) error { return fmt.Errorf("pgrouter: Migrate: migration %s: %w", s.name, err) }
	ok, def, err := indexAsDefined(ctx, conn, s)
	if err != nil {
		return fail(err)
	}
	if def != "" && !ok {
		if _, err := conn.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+s.index); err != nil {
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

// indexAsDefined reads the index s builds: def is its definition
// (pg_get_indexdef; "" if there is no such index), ok whether it is valid
// and defined as s's statement says (which pg_get_indexdef writes with
// the table's schema and "USING btree").
func indexAsDefined(ctx context.Context, conn *pgxpool.Conn, s migrationStep) (ok bool, def string, err error) {
	var valid bool
	var schema string
	err = conn.QueryRow(ctx, `SELECT i.indisvalid AND i.indisready AND i.indislive, pg_get_indexdef(i.indexrelid), n.nspname
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE i.indexrelid = to_regclass($1)`, s.index).Scan(&valid, &def, &schema)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read index %s: %w", s.index, err)
	}
	got := strings.Replace(strings.Replace(def, " USING btree ", " ", 1), " ON "+schema+".", " ON ", 1)
	want := strings.TrimSuffix(strings.Replace(sqlStatement(s.sql), "CONCURRENTLY IF NOT EXISTS ", "", 1), ";")
	return valid && got == want, def, nil
}
