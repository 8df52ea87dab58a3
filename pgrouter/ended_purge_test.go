package pgrouter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestEndedPurgeReadsOnlyTheOldRecords: the maintenance round's purge of
// leaserouter_ended (purge_abandoned.sql, about once a minute in every
// Router: the table is the schema's) finds the records older than
// endedKeep without reading the younger ones; the table holds ten minutes
// of records, one per completing statement (at 50k jobs/s, about 0.5 GB).
// Without an index on at, or with the instant read by the volatile
// clock_timestamp() in the condition itself, it read all of them.
func TestEndedPurgeReadsOnlyTheOldRecords(t *testing.T) {
	const n, old = 100000, 1000
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, `INSERT INTO leaserouter_ended (op, at, tokens, ats)
		SELECT i, clock_timestamp() - interval '11 minutes' + (CASE WHEN i <= $2 THEN 0 ELSE 2 END) * interval '1 minute' + i * interval '1 microsecond',
			ARRAY[i, i + 1], ARRAY[clock_timestamp(), clock_timestamp()]
		FROM generate_series(1, $1::int) i`, n, old)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `ANALYZE leaserouter_ended`)
	require.NoError(t, err)
	sql, names := pgrouter.Statement("purge_abandoned")
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var plan []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql,
		append([]any{pgx.QueryExecModeSimpleProtocol}, bindPositional(names, map[string]any{"keep_us": int64(24 * time.Hour / time.Microsecond),
			"ended_keep_us": int64(10 * time.Minute / time.Microsecond)})...)...).Scan(&plan))
	var out []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(plan, &out))
	read := out[0].Plan.unlockedRead("leaserouter_ended")
	require.LessOrEqual(t, read, 2*old, "records of leaserouter_ended read to purge the %d older than endedKeep among %d:\n%s", old, n, plan)
}
