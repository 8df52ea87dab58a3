package pgrouter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// newRouter returns a Router on a fresh database, closed when t ends.
func newRouter[T any](t *testing.T, opts pgrouter.Options) (*pgrouter.Router[T], *pgxpool.Pool) {
	t.Helper()
	db := pgtest.New(t)
	return routerOn[T](t, db, opts), db
}

// routerOn returns a Router on db, closed when t ends.
func routerOn[T any](t *testing.T, db *pgxpool.Pool, opts pgrouter.Options) *pgrouter.Router[T] {
	t.Helper()
	r, err := pgrouter.New[T](t.Context(), db, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		// A done ctx: leases still held are revoked at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := r.Close(ctx); err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
	})
	return r
}

// eventually polls cond every 10ms until it holds, failing t after limit:
// for waits on the database's clock, which the test cannot drive.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitDBTime waits until the database's clock is past at (bounded by
// 10s): leases expire on that clock, which no test can drive.
func awaitDBTime(t *testing.T, db *pgxpool.Pool, at time.Time) {
	t.Helper()
	eventually(t, 10*time.Second, "database clock past "+at.String(), func() bool {
		var past bool
		require.NoError(t, db.QueryRow(context.Background(), "SELECT clock_timestamp() > $1", at).Scan(&past))
		return past
	})
}

// enqueueJobs enqueues n jobs "<prefix><i>" with payload i in one batch.
func enqueueJobs(t *testing.T, r *pgrouter.Router[int], prefix string, n int) {
	t.Helper()
	specs := make([]leaserouter.JobSpec[int], n)
	for i := range specs {
		specs[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint(prefix, i), Payload: i}
	}
	_, err := r.EnqueueMany(t.Context(), specs)
	require.NoError(t, err)
}

// leaseOn enqueues job id on r and leases it to worker "w".
func leaseOn(t *testing.T, r *pgrouter.Router[int], id string) *pgrouter.Lease[int] {
	t.Helper()
	require.NoError(t, r.Enqueue(t.Context(), id, 1))
	l, err := r.TryAcquire(t.Context(), "w")
	require.NoError(t, err)
	return l
}

// stateNamed is the leaserouter.State whose label is name (a label of
// the state column's enum, read as text).
func stateNamed(t *testing.T, name string) leaserouter.State {
	t.Helper()
	for s := leaserouter.StatePending; s <= leaserouter.StateCanceled; s++ {
		if pgrouter.StateLabel(s) == name {
			return s
		}
	}
	t.Fatalf("no leaserouter.State is named %q", name)
	return 0
}

// jobState reads job id's state and attempt directly from the table (no
// settling, on base: not through a proxy).
func jobState(t *testing.T, base *pgxpool.Pool, id string) (leaserouter.State, int) {
	t.Helper()
	var state string
	var attempt int32
	require.NoError(t, base.QueryRow(context.Background(),
		"SELECT state::text, attempt FROM leaserouter_jobs WHERE id = $1", id).Scan(&state, &attempt))
	return stateNamed(t, state), int(attempt)
}

// deadlineOf is ctx's deadline.
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// ctxLease is a lease duration far above the 1s the ctx tests allow a
// call to return in after its ctx ended: a call that waits for a lease's
// duration instead of its ctx is unambiguous on a busy machine.
const ctxLease = 10 * time.Second
