package pgrouter_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// Many processes on one queue: where their Routers' statements would
// collide (see BenchmarkProcesses).

// rowsOf runs a statement of sql/ with values for its parameters on q
// and counts the rows it returns.
func rowsOf(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, name string, values map[string]any) int {
	t.Helper()
	sql, names := pgrouter.Statement(name)
	rows, err := q.Query(t.Context(), sql, bindPositional(names, values)...)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		n++
	}
	require.NoError(t, rows.Err())
	return n
}

// TestOnePurgeOfAQueueAtATime: a purge that finds another purge of its
// queue in flight (another process's maintenance round) deletes nothing,
// rather than walking the rows that one holds from the same end of the
// index; once that one has committed, the next deletes what is due.
// Another queue's purge is not held back.
func TestOnePurgeOfAQueueAtATime(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, `INSERT INTO leaserouter_jobs
		(queue, id, state, ready_at, max_attempts, payload, created_at, updated_at, purge_at)
		SELECT q, 'j' || i, 'succeeded', now(), 5, '1', now(), now(), now() - interval '1 hour' + i * interval '1 ms'
		FROM generate_series(1, 10) i, unnest(ARRAY['default', 'other']) q`)
	require.NoError(t, err)
	purge := func(q interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	}, queue string, limit int) int {
		return rowsOf(t, q, "purge", map[string]any{"queue": queue, "limit": limit})
	}

	inFlight, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = inFlight.Rollback(context.Background()) }()
	require.Equal(t, 1, purge(inFlight, "default", 1), "the purge in flight")
	require.Zero(t, purge(db, "default", 1000), "another purge of the queue while one is in flight")
	require.Equal(t, 10, purge(db, "other", 1000), "another queue's purge")
	require.NoError(t, inFlight.Commit(ctx))
	require.Equal(t, 9, purge(db, "default", 1000), "the rest, once the purge in flight committed")
}
