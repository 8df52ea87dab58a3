package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestLifecycle: enqueue, lease, complete; the lease's token is above the
// Unix time in nanoseconds; a second Complete is refused as completed.
func TestLifecycle(t *testing.T) {
	before := time.Now()
	r, _ := newRouter[map[string]int](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", map[string]int{"n": 7}))
	l, err := r.TryAcquire(ctx, "w1")
	require.NoError(t, err)
	require.Equal(t, "a", l.JobID)
	require.Equal(t, map[string]int{"n": 7}, l.Payload)
	require.Equal(t, 1, l.Attempt)
	require.Equal(t, "w1", l.WorkerID)
	require.Greater(t, uint64(l.Token), uint64(before.UnixNano()))
	require.WithinDuration(t, time.Now().Add(leaserouter.DefaultLeaseDuration), l.Expiry(), 5*time.Second)

	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StateLeased, j.State)
	require.Equal(t, l.Token, j.Token)
	require.Equal(t, "w1", j.Owner)

	require.NoError(t, l.Complete(ctx))
	j, ok, err = r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StateSucceeded, j.State)

	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(ctx), &lost)
	require.Equal(t, leaserouter.LostCompleted, lost.Reason)
	require.Equal(t, l.Token, lost.Current)

	_, err = r.TryAcquire(ctx, "w1")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	s, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, s.Succeeded)
	require.EqualValues(t, 1, s.Enqueued)
	require.EqualValues(t, 1, s.LeasesGranted)
	require.EqualValues(t, 1, s.StaleRejections)
}

// unclosedWithLease returns a Router the test must Close itself, holding
// a lease on job "a".
func unclosedWithLease(t *testing.T) (*pgrouter.Router[int], *pgrouter.Lease[int]) {
	r, err := pgrouter.New[int](t.Context(), pgtest.New(t), pgrouter.Options{})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	l, err := r.TryAcquire(t.Context(), "w")
	require.NoError(t, err)
	return r, l
}

// TestClose: Close refuses new work and revokes leases still held when
// its ctx is done (returning ctx.Err()): pending again, the holder
// refused as revoked; a second Close returns nil. (That it wakes blocked
// Acquires is TestCloseWakesBlockedAcquires'.)
func TestClose(t *testing.T) {
	r, l := unclosedWithLease(t)
	ctx := t.Context()
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.Close(cctx), context.DeadlineExceeded)
	require.ErrorIs(t, r.Enqueue(ctx, "b", 1), leaserouter.ErrClosed)
	_, err := r.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(ctx), &lost)
	require.Equal(t, leaserouter.LostRevoked, lost.Reason)
	j, ok, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StatePending, j.State)
	require.NoError(t, r.Close(ctx), "again: nil")
}

// TestCloseWakesBlockedAcquires: Close wakes an Acquire blocked before it
// began, which returns ErrClosed: with no lease to revoke (no NOTIFY) and
// PollInterval an hour, only Close's own wake-up can end its wait within
// the test's bound.
func TestCloseWakesBlockedAcquires(t *testing.T) {
	r, err := pgrouter.New[int](t.Context(), pgtest.New(t), pgrouter.Options{PollInterval: time.Hour})
	require.NoError(t, err)
	blocked := make(chan error, 1)
	go func() {
		_, err := r.Acquire(t.Context(), "w")
		blocked <- err
	}()
	eventually(t, 10*time.Second, "the Acquire blocked", func() bool { return pgrouter.Parked(r) == 1 })
	require.NoError(t, r.Close(t.Context()))
	select {
	case err := <-blocked:
		require.ErrorIs(t, err, leaserouter.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake the blocked Acquire within 10s")
	}
}

// TestTokenFloor: tokens are above TokenFloor, and a later Router with a
// lower floor never lowers the sequence.
func TestTokenFloor(t *testing.T) {
	const floor = leaserouter.Token(1) << 62
	r, db := newRouter[int](t, pgrouter.Options{TokenFloor: floor})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	require.Greater(t, l.Token, floor)
	r2 := routerOn[int](t, db, pgrouter.Options{})
	require.NoError(t, r2.Enqueue(ctx, "b", 1))
	l2, err := r2.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Greater(t, l2.Token, l.Token)
}

// TestCloseEndsAtAbandonedExpiry: Close with a ctx that is never done
// waits for an abandoned lease only until its expiry.
func TestCloseEndsAtAbandonedExpiry(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{LeaseDuration: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	l, err := r.TryAcquire(ctx, "abandoned")
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- r.Close(context.Background()) }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited past the abandoned lease's expiry")
	}
	// Close stops waiting at the expiry as this process proved it (send
	// time + LeaseDuration), a round trip before the database's: what is
	// still valid then is revoked.
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(ctx), &lost)
	require.Contains(t, []leaserouter.LostReason{leaserouter.LostExpired, leaserouter.LostRevoked}, lost.Reason)
}

// TestRevokedLastAttemptIsPendingAgain: Close revoking a lease on a job's
// last attempt makes the job pending again at once, as in the core (the
// revocation is Close's doing, not the job's: a deploy does not kill a job
// on its last attempt); the next process leases it once more, and that
// lease ending without success makes it dead.
func TestRevokedLastAttemptIsPendingAgain(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{MaxAttempts: 1})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	_, err = r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, r.Close(done), context.Canceled)
	other := routerOn[int](t, db, pgrouter.Options{MaxAttempts: 1})
	j, _, err := other.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StatePending, j.State, "revoked: pending again, even on its last attempt")
	require.Equal(t, 1, j.Attempt, "the revoked lease counted")
	l, err := other.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 2, l.Attempt)
	require.NoError(t, l.Release(ctx))
	j, _, err = other.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateDead, j.State, "attempts used up by a release")
}

// TestCloseHonoursCtxWithServerStalled: Close with a lease still held and
// the server stalled returns ctx.Err() when its ctx ends (within 1s
// here), not after a revocation that waits for the server.
func TestCloseHonoursCtxWithServerStalled(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, serverOf(base))
	db := poolVia(t, base, p.ln, 0)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: ctxLease})
	leaseOn(t, r, "a")
	p.stall()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err := r.Close(ctx)
	late := time.Since(deadlineOf(ctx))
	t.Logf("Close returned %v after its ctx ended (server stalled): %v", late, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, late, time.Second, "Close returns when its ctx ends")
	p.resume()
}

// TestCloseOutOfTimeSaysItsRevocationDidNotFinish: Close with a done ctx,
// a lease still held and the server stalled cannot revoke it within its
// grace; it returns an error wrapping ctx.Err() and the revocation's
// failure, not ctx.Err() itself, which says every lease was revoked (the
// lease may be revoked or end at its expiry: the server may yet run the
// statement it was sent).
func TestCloseOutOfTimeSaysItsRevocationDidNotFinish(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, serverOf(base))
	db := poolVia(t, base, p.ln, 0)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: ctxLease})
	leaseOn(t, r, "a")
	p.stall()
	defer p.resume()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := r.Close(ctx)
	t.Logf("Close(done ctx), server stalled: %v", err)
	require.ErrorIs(t, err, context.Canceled)
	require.NotEqual(t, ctx.Err(), err, "not ctx.Err() itself: the revocation did not finish")
	require.ErrorContains(t, err, "revoke leases")
}

// TestCloseReturnsWhenItsCtxEndsWithBackgroundWork: Close returns when
// its ctx ends with the server stalled, a lease to revoke and a
// background task (a stopped Run's Fail that could not get through) in
// flight, not when the server answers. The bound is generous, for a busy
// machine: that the revocation's grace and the task's own do not add up
// (~170ms once) is pinned without the clock by
// TestWithGraceAddsNothingToAGrace.
func TestCloseReturnsWhenItsCtxEndsWithBackgroundWork(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, serverOf(base))
	db := poolVia(t, base, p.ln, 0)
	r, err := pgrouter.New[int](t.Context(), db, pgrouter.Options{LeaseDuration: ctxLease})
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
			close(started)
			<-release
			return errors.New("boom")
		})
	}()
	<-started
	p.stall()
	close(release)
	cancel()
	require.NoError(t, <-done) // its release of "a" left to the background: the server is stalled
	cctx, ccancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer ccancel()
	err = r.Close(cctx)
	late := time.Since(deadlineOf(cctx))
	t.Logf("Close returned %v after its ctx ended: %v", late, err)
	p.resume()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, late, time.Second, "Close returns when its ctx ends")
}

// TestCloseNeverRevokesRunLeasesNotRunning: Close with a ctx done
// already revokes the running leases at once, but not a Run's leases that
// are not running: one leased ahead of its turn is handed back (its
// attempt not counted), a finished one completed, by the stopping Run.
// Before the fix the revocation raced the Run's own hand-back and
// completion, and mostly won (the finished job revoked, to run again; a
// job never started counting an attempt): several rounds, to be sure.
func TestCloseNeverRevokesRunLeasesNotRunning(t *testing.T) {
	db := pgtest.New(t)
	for round := range 6 {
		r, err := pgrouter.New[int](t.Context(), db, pgrouter.Options{Queue: fmt.Sprintf("q%d", round), LeaseDuration: 10 * time.Second})
		require.NoError(t, err)
		ctx := t.Context()
		for i, id := range []string{"0", "1", "2", "a", "b", "c", "d"} {
			require.NoError(t, r.Enqueue(ctx, id, i, leaserouter.WithPriority(10-i)))
		}
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() { // batches [0], [1 2], [a b c d]: a finishes, b runs, c and d wait
			done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, Batch: 4, HeartbeatInterval: 5 * time.Second},
				func(hctx context.Context, l *pgrouter.Lease[int]) error {
					if l.JobID == "b" {
						close(started)
						<-release
					}
					return nil
				})
		}()
		<-started
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, r.Close(cctx), context.Canceled) // b revoked at once
		state := func(id string) (leaserouter.State, int, string) {
			var st string
			var attempt int
			var ended string
			require.NoError(t, db.QueryRow(ctx, "SELECT state::text, attempt, ended FROM leaserouter_jobs WHERE queue = $1 AND id = $2",
				fmt.Sprintf("q%d", round), id).Scan(&st, &attempt, &ended))
			return stateNamed(t, st), attempt, ended
		}
		// While b still runs, the stopping Run completes a and hands back c
		// and d (on its heartbeat connection); the revocation must not have
		// ended them first.
		eventually(t, 10*time.Second, "a completed, c and d handed back", func() bool {
			a, _, _ := state("a")
			c, _, _ := state("c")
			d, _, _ := state("d")
			return a != leaserouter.StateLeased && c != leaserouter.StateLeased && d != leaserouter.StateLeased
		})
		st, attempt, ended := state("a")
		require.Equal(t, leaserouter.StateSucceeded, st, "round %d: a finished lease is completed, not revoked (%d, %s)", round, attempt, ended)
		for _, id := range []string{"c", "d"} {
			st, attempt, ended = state(id)
			require.Equal(t, leaserouter.StatePending, st, "round %d: %s", round, id)
			require.Equal(t, 0, attempt, "round %d: %s never started: no attempt counted (ended %s)", round, id, ended)
		}
		close(release)
		require.NoError(t, <-done)
		st, attempt, ended = state("b") // revoked, or completed if the revocation did not get through in time
		t.Logf("round %d: the running lease: %v attempt %d ended %q", round, st, attempt, ended)
	}
}

// New refuses a pool whose sessions default to an isolation other than
// READ COMMITTED (a claim or a lease's end would fail with serialization
// failures under contention), naming it, and accepts READ COMMITTED given
// explicitly; Migrate works on either.
func TestNewRefusesAPoolNotReadCommittedByDefault(t *testing.T) {
	db := pgtest.New(t)
	for _, iso := range []string{"repeatable read", "serializable", "read committed"} {
		t.Run(iso, func(t *testing.T) {
			cfg := db.Config().Copy()
			cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			require.NoError(t, pgrouter.Migrate(t.Context(), pool))
			r, err := pgrouter.New[int](t.Context(), pool, pgrouter.Options{})
			if iso == "read committed" {
				require.NoError(t, err)
				require.NoError(t, r.Close(t.Context()))
				return
			}
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			require.ErrorContains(t, err, iso)
		})
	}
}
