package benchmarks

// TestWALPerRecordType: where pgrouter's WAL goes, by record type, for
// the life of n no-op jobs (EnqueueMany of 1,000, then Run with 2
// workers until every job finished, and at Retention -1 until every row
// is purged), each phase after a CHECKPOINT, read with pg_walinspect.
// It only reports (t.Log); run it with
//
//	cd benchmarks && LEASEROUTER_WALROW=30000 go test -run TestWALPerRecordType -v -count=1 .
//
// LEASEROUTER_WALROW_FILLFACTOR=N sets the jobs table's fillfactor
// first. Autovacuum may run during a phase: its records (Heap2/PRUNE,
// Btree/VACUUM, ...) vary from run to run, so compare record types, not
// only totals.

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

func TestWALPerRecordType(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LEASEROUTER_WALROW"))
	if n <= 0 {
		t.Skip("set LEASEROUTER_WALROW to the number of jobs")
	}
	for _, retention := range pgrouterRetentions {
		t.Run(retention.name, func(t *testing.T) {
			walPhases(t, n, retention.d)
		})
	}
}

// walRecord is one record type's line of pg_get_wal_stats.
type walRecord struct {
	kind        string
	count       int64
	bytes, fpis int64 // record bytes (without FPIs), FPI bytes
}

func walPhases(t *testing.T, n int, retention time.Duration) {
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect")
	require.NoError(t, err)
	if ff := os.Getenv("LEASEROUTER_WALROW_FILLFACTOR"); ff != "" {
		_, err = db.Exec(ctx, "ALTER TABLE leaserouter_jobs SET (fillfactor = "+ff+")")
		require.NoError(t, err)
	}
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{Retention: retention})
	require.NoError(t, err)
	defer r.Close(ctx)

	start := checkpoint(t, db)
	require.NoError(t, enqueueSpecs(ctx, r, n))
	enq := walSince(t, db, start)
	var size int64
	require.NoError(t, db.QueryRow(ctx, "SELECT pg_relation_size('leaserouter_jobs')").Scan(&size))

	start = checkpoint(t, db)
	var left atomic.Int64
	left.Store(int64(n))
	rctx, cancel := context.WithCancel(ctx)
	t0 := time.Now()
	err = r.Run(rctx, leaserouter.WorkerOptions{Workers: dbWorkers}, func(context.Context, *pgrouter.Lease[int]) error {
		if left.Add(-1) == 0 {
			cancel()
		}
		return nil
	})
	elapsed := time.Since(t0)
	cancel()
	require.NoError(t, err)
	if retention < 0 {
		require.Eventually(t, func() bool {
			var rows int64
			require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs").Scan(&rows))
			return rows == 0
		}, time.Minute, 50*time.Millisecond)
	}
	drain := walSince(t, db, start)
	t.Logf("table %d B/pending job (%d pages); drain %.0f jobs/s", size/int64(n), size/8192, float64(n)/elapsed.Seconds())
	walReport(t, "enqueue", n, enq)
	walReport(t, "drain", n, drain)
}

// checkpoint runs a CHECKPOINT and returns the WAL insert position after it.
func checkpoint(t *testing.T, db *pgxpool.Pool) string {
	ctx := context.Background()
	_, err := db.Exec(ctx, "CHECKPOINT")
	require.NoError(t, err)
	var lsn string
	require.NoError(t, db.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn))
	return lsn
}

// walSince reads the WAL from start to now by record type.
func walSince(t *testing.T, db *pgxpool.Pool, start string) []walRecord {
	ctx := context.Background()
	// The last record may still be in the buffers: a flush makes it readable.
	_, err := db.Exec(ctx, "SELECT pg_switch_wal()")
	require.NoError(t, err)
	rows, err := db.Query(ctx, `SELECT "resource_manager/record_type", count, record_size, fpi_size
		FROM pg_get_wal_stats($1::pg_lsn, pg_current_wal_flush_lsn(), true) WHERE count > 0`, start)
	require.NoError(t, err)
	defer rows.Close()
	var out []walRecord
	for rows.Next() {
		var w walRecord
		require.NoError(t, rows.Scan(&w.kind, &w.count, &w.bytes, &w.fpis))
		out = append(out, w)
	}
	require.NoError(t, rows.Err())
	sort.Slice(out, func(i, j int) bool { return out[i].bytes+out[i].fpis > out[j].bytes+out[j].fpis })
	return out
}

// walReport logs a phase's records per job.
func walReport(t *testing.T, phase string, n int, recs []walRecord) {
	var b strings.Builder
	var total int64
	for _, w := range recs {
		total += w.bytes + w.fpis
	}
	rm := map[string]int64{}
	for _, w := range recs {
		rm[strings.SplitN(w.kind, "/", 2)[0]] += w.bytes + w.fpis
	}
	fmt.Fprintf(&b, "%s: %.1f B/job (Heap %.1f, Heap2 %.1f, Btree %.1f)\n", phase, float64(total)/float64(n),
		float64(rm["Heap"])/float64(n), float64(rm["Heap2"])/float64(n), float64(rm["Btree"])/float64(n))
	for _, w := range recs {
		if float64(w.bytes+w.fpis)/float64(n) < 1 {
			continue
		}
		fmt.Fprintf(&b, "  %-28s %6.2f rec/job %8.1f B/job (FPI %6.1f)\n", w.kind,
			float64(w.count)/float64(n), float64(w.bytes+w.fpis)/float64(n), float64(w.fpis)/float64(n))
	}
	t.Log(b.String())
}
