package benchmarks

// The server-only bound: how fast the server alone drains a queue with
// pgrouter's own statements, with no client, no driver and no network in
// the way. A procedure (serverDrain) runs, inside the server, what Run's
// workers make the server do for each batch of a no-op workload at
// Retention -1: claim up to 256 pending jobs (claim.sql: ready order, FOR
// UPDATE SKIP LOCKED, a fencing token each from the sequence), complete
// them (leases_end.sql: each row locked by key, the lease checked valid
// with leaserouter_lease_valid, the row moved by leaserouter_end_lease),
// delete the finished ones (purge.sql) and commit. Same migrated table and
// indexes, same server settings (fsync on) as the comparison with River:
//
//	cd benchmarks && go test -run XXX -bench 'ServerBound|Pgrouter' -benchtime 20000x -count 3
//
// Client, driver and server share the machine's cores in the real runs,
// so the whole system cannot reach this bound; it says how far from the
// hardware a side is.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// serverDrain is the probe: a procedure that drains queue q in batches of
// up to n (claim, complete, purge, commit) until a claim finds nothing,
// and returns the number of jobs it completed. The statements mirror
// pgrouter/sql's claim.sql, leases_end.sql (reason 'completed', no
// retention: purge_at is the instant of the completion) and purge.sql
// (without its advisory lock: each backend purges what its own batch
// finished, so none is left behind when the other has stopped).
// With drop, the completion deletes each valid lease's row instead (and
// the purge finds nothing): how much an end that drops the row at once
// would save, for Retention < 0.
const serverDrain = `
CREATE OR REPLACE PROCEDURE leaserouter_probe_drain(q text, n int, drop boolean, INOUT done bigint DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
	ids text[];
	tokens bigint[];
	ended int;
BEGIN
	LOOP
		WITH picked AS (
			SELECT queue, id, priority, ready_at, seq FROM leaserouter_jobs
			WHERE queue = q AND state = 'pending'
				AND NOT EXISTS (SELECT FROM leaserouter_abandoned_claims WHERE id = 0)
			ORDER BY priority DESC, ready_at, seq
			LIMIT n FOR UPDATE SKIP LOCKED),
		numbered AS (
			SELECT id, nextval('leaserouter_token') AS token
			FROM (SELECT * FROM picked ORDER BY priority DESC, ready_at, seq) p),
		c AS (SELECT clock_timestamp() AS now),
		t AS (SELECT array_agg(id) AS ids, array_agg(token) AS tokens FROM numbered),
		u AS (
			UPDATE leaserouter_jobs j SET
				state = 'leased', token = nu.token, attempt = j.attempt + 1, owner = 'probe', ended = '', claim = 0,
				lease_expires_at = c.now + interval '30 seconds', updated_at = c.now, leased_at = c.now
			FROM t, unnest(t.ids, t.tokens) AS nu(id, token), c
			WHERE j.queue = q AND j.id = nu.id
			RETURNING j.id, j.token, j.payload)
		SELECT array_agg(u.id), array_agg(u.token) INTO ids, tokens FROM u;
		EXIT WHEN ids IS NULL;

		IF drop THEN
			-- the end as a delete of the row (what no retention could
			-- be): the same lock and check, no new row version, no purge
			WITH l AS (
				SELECT j.id, leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, h.token) AS valid
				FROM (SELECT ids, tokens OFFSET 0) AS a(ids, tokens),
					LATERAL (SELECT * FROM unnest(a.ids, a.tokens) AS u(id, token) ORDER BY id) AS h,
					LATERAL (SELECT * FROM leaserouter_jobs j WHERE j.queue = q AND j.id = h.id FOR UPDATE) AS j),
			x AS (
				DELETE FROM leaserouter_jobs j USING l
				WHERE j.queue = q AND j.id = l.id AND l.valid
				RETURNING j.id)
			SELECT count(*) INTO ended FROM x;
		ELSE
			WITH l AS (
				SELECT j.id, clock_timestamp() AS now,
					leaserouter_lease_valid(j.state, j.token, j.lease_expires_at, h.token) AS valid
				FROM (SELECT ids, tokens OFFSET 0) AS a(ids, tokens),
					LATERAL (SELECT * FROM unnest(a.ids, a.tokens) AS u(id, token) ORDER BY id) AS h,
					LATERAL (SELECT * FROM leaserouter_jobs j WHERE j.queue = q AND j.id = h.id FOR UPDATE) AS j),
			x AS (
				UPDATE leaserouter_jobs j SET
					(state, ready_at, purge_at, owner, lease_expires_at, ended, requeued, updated_at, last_error) =
						(SELECT * FROM leaserouter_end_lease('completed', j.attempt, j.max_attempts, false, 0,
							l.now, j.last_error, 0))
				FROM l
				WHERE j.queue = q AND j.id = l.id AND l.valid
				RETURNING j.id)
			SELECT count(*) INTO ended FROM x;
		END IF;
		done := done + ended;

		WITH p AS (
			SELECT array_agg(id) AS ids FROM (SELECT id FROM leaserouter_jobs
				WHERE queue = q AND leaserouter_past_retention(state, purge_at)
					AND purge_at <= (SELECT clock_timestamp())
				ORDER BY purge_at LIMIT 1000 FOR UPDATE SKIP LOCKED) l)
		DELETE FROM leaserouter_jobs j
		USING p, unnest(p.ids) AS u(id)
		WHERE j.queue = q AND j.id = u.id;
		COMMIT;
	END LOOP;
END $$`

// serverBoundBatch is the claim's batch: pgrouter's default Batch ceiling.
const serverBoundBatch = 256

// BenchmarkServerBound: the probe on 1 and 2 backends at once (the
// machine's cores), ending leases as pgrouter does (end=update, then the
// purge) and by deleting the rows (end=delete); b.N jobs enqueued by
// pgrouter first; jobs/s from the first CALL to the last one's return.
func BenchmarkServerBound(b *testing.B) {
	for _, drop := range []bool{false, true} {
		for _, backends := range []int{1, 2} {
			b.Run(fmt.Sprintf("end=%s/backends=%d", endName(drop), backends), func(b *testing.B) {
				b.ReportMetric(serverBoundJobs(b, b.N, backends, drop), "jobs/s")
			})
		}
	}
}

// endName names the probe's way of ending leases.
func endName(drop bool) string {
	if drop {
		return "delete"
	}
	return "update"
}

// TestServerBoundDrains runs the probe on a few jobs both ways: every job
// is completed and deleted, each exactly once.
func TestServerBoundDrains(t *testing.T) {
	for _, drop := range []bool{false, true} {
		if rate := serverBoundJobs(t, 1000, 2, drop); rate <= 0 {
			t.Fatalf("end=%s: %v jobs/s", endName(drop), rate)
		}
	}
}

// serverBoundJobs enqueues n no-op jobs with pgrouter, drains them with
// the probe on the given number of backends (drop: ending by delete), checks every job was
// completed once and none is left, and returns jobs/s.
func serverBoundJobs(tb testing.TB, n, backends int, drop bool) float64 {
	db := pgtest.New(tb)
	ctx := context.Background()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{Retention: -1})
	if err != nil {
		tb.Fatal(err)
	}
	// The Router only migrates and enqueues: closed before the drain, so
	// its maintenance loop does not share the server with the probe.
	if err := enqueueSpecs(ctx, r, n); err != nil {
		tb.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Exec(ctx, serverDrain); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Exec(ctx, "ANALYZE leaserouter_jobs"); err != nil {
		tb.Fatal(err)
	}
	done := make([]int64, backends)
	resetTimer(tb)
	start := time.Now()
	var g errgroup.Group
	for i := range backends {
		g.Go(func() error { return callDrain(ctx, db, drop, &done[i]) })
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
	elapsed := time.Since(start)
	var total int64
	for _, d := range done {
		total += d
	}
	var left int64
	if err := db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs").Scan(&left); err != nil {
		tb.Fatal(err)
	}
	if total != int64(n) || left != 0 {
		tb.Fatalf("probe completed %d of %d jobs, %d rows left", total, n, left)
	}
	return float64(n) / elapsed.Seconds()
}

// callDrain runs the probe on a connection of its own and stores the
// number of jobs it completed in done.
func callDrain(ctx context.Context, db *pgxpool.Pool, drop bool, done *int64) error {
	c, err := db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	return c.QueryRow(ctx, "CALL leaserouter_probe_drain($1, $2, $3)", pgrouter.DefaultQueue, serverBoundBatch, drop).Scan(done)
}

// enqueueSpecs enqueues n no-op jobs with EnqueueMany, enqueueBatch a
// call (IDs j0...).
func enqueueSpecs(ctx context.Context, r *pgrouter.Router[int], n int) error {
	specs := make([]leaserouter.JobSpec[int], 0, enqueueBatch)
	for i := range n {
		specs = append(specs, leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i), Payload: i})
		if len(specs) == cap(specs) || i == n-1 {
			if _, err := r.EnqueueMany(ctx, specs); err != nil {
				return err
			}
			specs = specs[:0]
		}
	}
	return nil
}
