package benchmarks

// What a job costs the database, measured the same way for both sides
// over the timed part of a run: the statements the client sent (a pgx
// tracer on the pool the side runs on, and on every connection made from
// its config: pgrouter's heartbeat and LISTEN connections) and the WAL
// the server wrote (pg_current_wal_insert_lsn before and after; the
// throwaway server runs nothing else).

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// statementCounter is a pgx tracer counting the statements sent while on.
type statementCounter struct {
	on atomic.Bool
	n  atomic.Int64
}

func (c *statementCounter) count() {
	if c.on.Load() {
		c.n.Add(1)
	}
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.count()
	return ctx
}

func (*statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (*statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.count()
}

func (*statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *statementCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.count()
	return ctx
}

func (*statementCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// costMeter measures a side's statements and WAL over a timed window.
type costMeter struct {
	tb       testing.TB
	admin    *pgxpool.Pool // reads the WAL position (its statements are not counted)
	stmts    *statementCounter
	walStart string
}

// traced returns a pool on db's database whose statements m counts (and
// whose config, copied by pgrouter for its own connections, carries the
// tracer too); it is closed when tb ends.
func (m *costMeter) traced(db *pgxpool.Pool) *pgxpool.Pool {
	m.tb.Helper()
	m.admin, m.stmts = db, &statementCounter{}
	cfg := db.Config().Copy()
	cfg.ConnConfig.Tracer = m.stmts
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		m.tb.Fatal(err)
	}
	m.tb.Cleanup(p.Close)
	return p
}

// start begins the window.
func (m *costMeter) start() {
	m.tb.Helper()
	if err := m.admin.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&m.walStart); err != nil {
		m.tb.Fatal(err)
	}
	m.stmts.on.Store(true)
}

// stop ends the window and reports, for n jobs, statements per 1,000
// jobs and WAL bytes per job (only on a benchmark).
func (m *costMeter) stop(n int) {
	m.tb.Helper()
	m.stmts.on.Store(false)
	var wal float64
	if err := m.admin.QueryRow(context.Background(),
		"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)", m.walStart).Scan(&wal); err != nil {
		m.tb.Fatal(err)
	}
	if b, ok := m.tb.(*testing.B); ok {
		b.ReportMetric(1000*float64(m.stmts.n.Load())/float64(n), "stmts/1000jobs")
		b.ReportMetric(wal/float64(n), "WAL-B/job")
	}
}

// The meter counts every statement sent while on, single or in a batch,
// on the pool and on a connection made from its config, and none while
// off; and the WAL the window wrote.
func TestCostMeterCounts(t *testing.T) {
	m := &costMeter{tb: t}
	db := m.traced(pgtest.New(t))
	ctx := t.Context()
	_, err := db.Exec(ctx, "CREATE TABLE t (n int)")
	require.NoError(t, err)
	m.start()
	_, err = db.Exec(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)
	b := &pgx.Batch{}
	b.Queue("INSERT INTO t VALUES (2)")
	b.Queue("INSERT INTO t VALUES (3)")
	require.NoError(t, db.SendBatch(ctx, b).Close())
	conn, err := pgx.ConnectConfig(ctx, db.Config().ConnConfig.Copy())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	var wal float64
	require.NoError(t, m.admin.QueryRow(ctx,
		"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)", m.walStart).Scan(&wal))
	m.stop(1)
	_, err = db.Exec(ctx, "SELECT 2") // off: not counted
	require.NoError(t, err)
	require.Equal(t, int64(4), m.stmts.n.Load())
	require.Positive(t, wal, "three inserts wrote WAL")
}
