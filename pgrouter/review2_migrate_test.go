package pgrouter_test

// Review 2 (cold review of Migrate's concurrent index build): failing tests.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// Migrate's advisory lock keys (migrate.go): the one its transactions
// hold (and a Migrate of a version before the concurrent index builds
// held for its one transaction), and the one it holds for its session.
const (
	migrateXactLock    = int64(0x6c65617365726f75)
	migrateSessionLock = int64(0x6c65617365724d67)
)

// TestReview2MigrateCanceledReleasesItsLock: a Migrate whose ctx ends
// while its build waits gives up Migrate's session lock. pgx's default
// context handling only closes the socket: the server backend goes on
// with the CREATE INDEX CONCURRENTLY (it notices the client gone only
// when it next talks to it), holding the session advisory lock, so the
// next Migrate waits for that orphan instead of dropping an INVALID index
// and building again as documented.
func TestReview2MigrateCanceledReleasesItsLock(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	asVersion10(t, db)
	snap := openSnapshot(t, db)
	defer func() { _ = snap.Rollback(context.Background()) }()
	mctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	require.Error(t, pgrouter.Migrate(mctx, db))
	time.Sleep(time.Second)
	var holders []string
	require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(array_agg(a.state || ': ' || left(a.query, 60)), '{}') FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE l.locktype = 'advisory' AND l.granted AND (l.classid::bigint << 32 | l.objid::bigint) IN ($1, $2)`, migrateXactLock, migrateSessionLock).Scan(&holders))
	require.Empty(t, holders, "sessions still holding Migrate's advisory lock 1s after Migrate returned")
}

