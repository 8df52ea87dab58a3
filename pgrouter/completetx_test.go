package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// poolOf returns a pool of at most conns connections on a fresh database
// (migrated), closed when t ends.
func poolOf(t *testing.T, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg := pgtest.New(t).Config().Copy()
	cfg.MaxConns = conns
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// fencedWrite writes job l's result in tx after Fence, as the documented
// pattern does.
func fencedWrite(ctx context.Context, tx pgx.Tx, l *pgrouter.Lease[int]) error {
	if err := pgrouter.Fence(ctx, tx, "results/"+l.JobID, l.Token); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "INSERT INTO results VALUES ($1, $2)", l.JobID, l.Payload)
	return err
}

// TestRunHoldsLeaseDuringWorkAfterCompleteTx: inside Run, a handler that
// completes its lease with CompleteTx and then works in the same
// transaction for longer than LeaseDuration before committing keeps its
// lease (the open transaction holds the row with the completion written;
// Run's heartbeats prove it so): its ctx is not canceled, the commit
// succeeds, and every job ends succeeded after one handler call — with a
// pool of one connection (held by the handler's transaction) and of eight.
func TestRunHoldsLeaseDuringWorkAfterCompleteTx(t *testing.T) {
	const lease = time.Second
	for _, c := range []struct {
		pool          int32
		jobs, workers int
	}{{1, 3, 1}, {8, 6, 6}} {
		t.Run(fmt.Sprintf("pool of %d", c.pool), func(t *testing.T) {
			db := poolOf(t, c.pool)
			r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: lease})
			ctx := t.Context()
			_, err := db.Exec(ctx, "CREATE TABLE results (id text PRIMARY KEY, v int)")
			require.NoError(t, err)
			enqueueJobs(t, r, "j", c.jobs)

			var mu sync.Mutex
			calls := map[string]int{}
			var causes []string
			returned := 0
			stop := make(chan struct{})
			err = runUntil(t, r, leaserouter.WorkerOptions{Workers: c.workers, HeartbeatInterval: lease / 5}, stop,
				func(hctx context.Context, l *pgrouter.Lease[int]) (err error) {
					mu.Lock()
					calls[l.JobID]++
					mu.Unlock()
					defer func() {
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							causes = append(causes, fmt.Sprintf("%s: %v (cause %v)", l.JobID, err, context.Cause(hctx)))
						}
						if returned++; returned == c.jobs { // all done, or retries needed: enough to tell
							close(stop)
						}
					}()
					tx, err := db.Begin(hctx)
					if err != nil {
						return err
					}
					defer func() { _ = tx.Rollback(context.Background()) }()
					if err := fencedWrite(hctx, tx, l); err != nil {
						return err
					}
					if err := l.CompleteTx(hctx, tx); err != nil {
						return err
					}
					select { // more work in the transaction, well past LeaseDuration
					case <-time.After(5 * lease / 2):
					case <-hctx.Done():
						return context.Cause(hctx)
					}
					return tx.Commit(hctx)
				})
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, causes, "handlers failed with the database up")
			for i := range c.jobs {
				id := fmt.Sprint("j", i)
				require.Equal(t, 1, calls[id], "handler calls of %s", id)
				j, _, err := r.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, leaserouter.StateSucceeded, j.State, id)
				require.Equal(t, 1, j.Attempt, id)
			}
			var rows int
			require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM results").Scan(&rows))
			require.Equal(t, c.jobs, rows)
		})
	}
}

// TestRunLosesLeaseProperlyWhenCompleteTxRollsBackAfterExpiry: a
// handler's transaction that completed the lease holds it past its
// expiry, then rolls back: the lease is as before CompleteTx, expired, so
// Run reports it lost (the handler's ctx canceled with a LostExpired
// *LeaseLostError) and the job is retried; while the transaction was open
// the handler's ctx was not canceled.
func TestRunLosesLeaseProperlyWhenCompleteTxRollsBackAfterExpiry(t *testing.T) {
	const lease = time.Second
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: lease})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	var heldCause, lostCause error
	stop := make(chan struct{})
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: lease / 5}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			if l.Attempt > 1 {
				close(stop)
				return nil
			}
			tx, err := db.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if err := l.CompleteTx(hctx, tx); err != nil {
				return err
			}
			// Held well past the expiry (on the database's clock).
			for past := false; !past; time.Sleep(10 * time.Millisecond) {
				if err := db.QueryRow(ctx, "SELECT clock_timestamp() > $1", l.Expiry().Add(lease)).Scan(&past); err != nil {
					return err
				}
			}
			heldCause = context.Cause(hctx)
			if err := tx.Rollback(ctx); err != nil {
				return err
			}
			select {
			case <-hctx.Done():
				lostCause = context.Cause(hctx)
			case <-time.After(10 * lease):
			}
			return nil
		})
	require.NoError(t, err)
	require.NoError(t, heldCause, "the handler's ctx while its transaction held the completion")
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, lostCause, &lost, "the handler's ctx after the rollback")
	require.Equal(t, leaserouter.LostExpired, lost.Reason)
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	require.Equal(t, 2, j.Attempt)
}

// TestRefusedCompleteTxLeavesRowUnlockedAndTxUsable: a stale holder's
// CompleteTx is refused without leaving the job's row locked, so the
// valid holder's Heartbeat and Complete go through while the stale
// transaction is still open, and that transaction can still run
// statements and commit. A CompleteTx that fails (lock_timeout) leaves
// its transaction usable too.
func TestRefusedCompleteTxLeavesRowUnlockedAndTxUsable(t *testing.T) {
	db := pgtest.New(t)
	stale := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 200 * time.Millisecond, PollInterval: time.Hour})
	valid := routerOn[int](t, db, pgrouter.Options{LeaseDuration: time.Minute, PollInterval: time.Hour})
	ctx := t.Context()
	_, err := db.Exec(ctx, "CREATE TABLE log (v text)")
	require.NoError(t, err)
	old := leaseOn(t, stale, "a")
	awaitDBTime(t, db, old.Expiry())
	cur, err := valid.TryAcquire(ctx, "valid")
	require.NoError(t, err)
	require.Equal(t, 2, cur.Attempt)

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "INSERT INTO log VALUES ('before')")
	require.NoError(t, err)
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, old.CompleteTx(ctx, tx), &lost)
	require.Equal(t, leaserouter.LostSuperseded, lost.Reason)
	require.Equal(t, cur.Token, lost.Current)

	// The stale transaction is still open: the valid holder does not wait
	// for it (a bound far above a round trip, far below the lease).
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, cur.Heartbeat(vctx, []byte("p")), "the valid holder's Heartbeat")
	require.NoError(t, cur.Complete(vctx), "the valid holder's Complete")

	_, err = tx.Exec(ctx, "INSERT INTO log VALUES ('after')")
	require.NoError(t, err, "the refused CompleteTx's transaction runs statements")
	require.NoError(t, tx.Commit(ctx))
	var n int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM log").Scan(&n))
	require.Equal(t, 2, n)

	// A CompleteTx that fails on a lock it cannot take in time leaves its
	// transaction usable, and succeeds once the lock is free.
	l := leaseOn(t, valid, "b")
	locker, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(ctx) }()
	_, err = locker.Exec(ctx, "SELECT FROM leaserouter_jobs WHERE id = 'b' FOR UPDATE")
	require.NoError(t, err)
	tx, err = db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL lock_timeout = '50ms'")
	require.NoError(t, err)
	err = l.CompleteTx(ctx, tx)
	require.Error(t, err)
	require.False(t, errors.As(err, &lost), "a lock timeout is not a refusal: %v", err)
	require.NoError(t, locker.Rollback(ctx))
	require.NoError(t, l.CompleteTx(ctx, tx), "the transaction is usable after the failed CompleteTx")
	require.NoError(t, tx.Commit(ctx))
	j, _, err := valid.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
}

// TestCompleteTxComposesWithSavepoints: a refused CompleteTx undoes only
// its own check, so an earlier CompleteTx in the same transaction still
// commits; a CompleteTx in a nested pgx.Tx that rolls back leaves the
// lease valid and its row unlocked, the outer transaction open.
func TestCompleteTxComposesWithSavepoints(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: time.Minute})
	ctx := t.Context()
	done := leaseOn(t, r, "done")
	stale := leaseOn(t, r, "stale")
	require.NoError(t, r.Cancel(ctx, "stale"))
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, done.CompleteTx(ctx, tx))
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, stale.CompleteTx(ctx, tx), &lost)
	require.Equal(t, leaserouter.LostCanceled, lost.Reason)

	nested := leaseOn(t, r, "nested")
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, nested.CompleteTx(ctx, sp))
	require.NoError(t, sp.Rollback(ctx))
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, nested.Heartbeat(vctx, nil), "the nested rollback let the row go, the lease valid")

	require.NoError(t, tx.Commit(ctx))
	for id, want := range map[string]leaserouter.State{
		"done": leaserouter.StateSucceeded, "stale": leaserouter.StateCanceled, "nested": leaserouter.StateLeased,
	} {
		j, _, err := r.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, j.State, id)
	}
}

// TestCompleteTxOnPurgedJobIsLeaseLost: CompleteTx of a lease whose job's
// row is gone (canceled, then purged with Retention < 0) is refused with a
// *LeaseLostError, as Complete is: counted as a stale rejection, the lease
// no longer held (Close does not wait for it), the transaction usable.
func TestCompleteTxOnPurgedJobIsLeaseLost(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{Retention: -1, PollInterval: 50 * time.Millisecond})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	require.NoError(t, r.Cancel(ctx, "a"))
	eventually(t, 10*time.Second, "the canceled job's row purged", func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE id = 'a'").Scan(&n))
		return n == 0
	})
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	err = l.CompleteTx(ctx, tx)
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, err, &lost, "CompleteTx of a lease whose job is gone")
	require.ErrorIs(t, err, leaserouter.ErrLeaseLost)
	require.Equal(t, "a", lost.JobID)
	require.Equal(t, l.Token, lost.Token)
	_, err = tx.Exec(ctx, "SELECT 1")
	require.NoError(t, err, "the transaction is usable after the refusal")
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.StaleRejections)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, r.Close(cctx), "the refused lease is not held: Close does not wait for it")
}

// cancelAtBatchEnd is a tracer that ends a ctx carrying a cancelKey right
// after a batch's results were read: a CompleteTx whose ctx ends after the
// check's reply came in, before its rollback to the savepoint.
type cancelAtBatchEnd struct{}

type cancelKey struct{}

func (cancelAtBatchEnd) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (cancelAtBatchEnd) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (cancelAtBatchEnd) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if c, ok := ctx.Value(cancelKey{}).(context.CancelFunc); ok {
		c()
	}
}
func (cancelAtBatchEnd) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (cancelAtBatchEnd) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestRefusedCompleteTxRollsBackAfterCtxEnd: a refused CompleteTx whose
// ctx ends after the check's reply came in (before the rollback to its
// savepoint) still lets go of the job's row: the stale caller's open
// transaction blocks neither the holder of a newer lease (its Heartbeat
// goes through) nor, for a lease past its expiry not settled yet, anyone
// locking the row or claiming the job; the transaction stays usable.
func TestRefusedCompleteTxRollsBackAfterCtxEnd(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config().Copy()
	cfg.ConnConfig.Tracer = cancelAtBatchEnd{}
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	const lease = 300 * time.Millisecond
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: lease, PollInterval: time.Hour})
	ctx := t.Context()
	completeTxCtxEnding := func(l *pgrouter.Lease[int], want leaserouter.LostReason) pgx.Tx {
		t.Helper()
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err = l.CompleteTx(context.WithValue(cctx, cancelKey{}, context.CancelFunc(cancel)), tx)
		require.Error(t, cctx.Err(), "the ctx ended after the check's reply")
		var lost *leaserouter.LeaseLostError
		require.ErrorAs(t, err, &lost)
		require.Equal(t, want, lost.Reason)
		return tx
	}

	// Superseded: the valid holder's Heartbeat does not wait for the
	// stale transaction (a bound far above a round trip).
	stale := leaseOn(t, r, "a")
	awaitDBTime(t, db, stale.Expiry())
	valid, err := r.TryAcquire(ctx, "w2")
	require.NoError(t, err)
	require.Equal(t, "a", valid.JobID)
	tx := completeTxCtxEnding(stale, leaserouter.LostSuperseded)
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	defer hcancel()
	require.NoError(t, valid.Heartbeat(hctx, nil), "the valid holder's Heartbeat")
	_, err = tx.Exec(ctx, "SELECT 1")
	require.NoError(t, err, "the stale transaction is usable")
	require.NoError(t, valid.Complete(hctx))

	// Expired, not settled: the check locked the row (same token); the
	// rollback let it go although ctx had ended.
	expired := leaseOn(t, r, "b")
	awaitDBTime(t, db, expired.Expiry())
	tx = completeTxCtxEnding(expired, leaserouter.LostExpired)
	_, err = db.Exec(ctx, "SELECT FROM leaserouter_jobs WHERE id = 'b' FOR UPDATE NOWAIT")
	require.NoError(t, err, "the refused CompleteTx's transaction does not hold the row")
	next, err := r.TryAcquire(ctx, "w2")
	require.NoError(t, err, "the job is settled and leased again")
	require.Equal(t, "b", next.JobID)
	require.Equal(t, 2, next.Attempt)
	_, err = tx.Exec(ctx, "SELECT 1")
	require.NoError(t, err, "the stale transaction is usable")
}

// TestCompleteTxOnLastConnection: an expired lease's CompleteTx, in a
// transaction holding the pool's only connection, is refused at once (it
// does not wait for a connection to settle the job).
func TestCompleteTxOnLastConnection(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	cfg.MaxConns = 1
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer db.Close()
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 50 * time.Millisecond})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	awaitDBTime(t, base, l.Expiry())
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// A wait for a connection (the caller's tx holds the only one) would
	// last until cctx's end.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.CompleteTx(cctx, tx), &lost)
	require.Equal(t, leaserouter.LostExpired, lost.Reason)
	require.NoError(t, cctx.Err(), "it waited for a connection the caller's tx holds")
}

// TestCompleteTx: completion commits with the caller's transaction, and
// the row stays locked until then; a rolled-back CompleteTx leaves the
// lease valid.
func TestCompleteTx(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	_, err := db.Exec(ctx, "CREATE TABLE results (id text PRIMARY KEY, v int)")
	require.NoError(t, err)
	l := leaseOn(t, r, "a")

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, pgrouter.Fence(ctx, tx, "results/a", l.Token))
	_, err = tx.Exec(ctx, "INSERT INTO results VALUES ('a', 1)")
	require.NoError(t, err)
	require.NoError(t, l.CompleteTx(ctx, tx))
	require.NoError(t, tx.Rollback(ctx))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateLeased, j.State, "rolled back: still leased")

	tx, err = db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, pgrouter.Fence(ctx, tx, "results/a", l.Token))
	_, err = tx.Exec(ctx, "INSERT INTO results VALUES ('a', 2)")
	require.NoError(t, err)
	require.NoError(t, l.CompleteTx(ctx, tx))
	require.NoError(t, tx.Commit(ctx))
	j, _, err = r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	var v int
	require.NoError(t, db.QueryRow(ctx, "SELECT v FROM results WHERE id = 'a'").Scan(&v))
	require.Equal(t, 2, v)
}

// TestLongTransactionHoldsCompletedJob: a user transaction that completed
// a job with CompleteTx and stays open holds the job's row: the job is
// neither re-leased nor settled meanwhile (even past the lease's expiry),
// other jobs are claimed without waiting, and the completion stands when
// the transaction commits.
func TestLongTransactionHoldsCompletedJob(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 100 * time.Millisecond, PollInterval: time.Hour})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "held", 1))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, l.CompleteTx(ctx, tx))
	awaitDBTime(t, db, l.Expiry().Add(100*time.Millisecond))

	require.NoError(t, r.Enqueue(ctx, "other", 2))
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	o, err := r.TryAcquire(cctx, "w2")
	require.NoError(t, err, "a claim does not wait for the held row")
	require.Equal(t, "other", o.JobID)
	_, err = r.TryAcquire(cctx, "w3")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "the held job is not re-leased")
	j, _, err := r.Get(cctx, "held")
	require.NoError(t, err, "Get does not wait for the held row")
	require.Equal(t, leaserouter.StateLeased, j.State, "not settled while held")

	require.NoError(t, tx.Commit(ctx))
	j, _, err = r.Get(ctx, "held")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
}
