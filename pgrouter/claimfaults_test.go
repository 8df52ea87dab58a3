package pgrouter_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// stallProxy forwards TCP connections to a PostgreSQL Unix socket; while
// stalled it forwards nothing in either direction (what it has read it
// holds, and forwards once resumed), as a stalled server or network does.
type stallProxy struct {
	ln     net.Listener
	socket string

	mu    sync.Mutex
	gate  chan struct{} // closed while flowing
	conns []net.Conn
}

// socketOf is the Unix socket path of the server db's pool connects to.
func socketOf(db *pgxpool.Pool) string {
	cfg := db.Config().ConnConfig
	return filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))
}

// poolVia returns a pool on base's database through a proxy listening on
// ln, with at most maxConns connections (0: pgxpool's default), closed
// when t ends.
func poolVia(t *testing.T, base *pgxpool.Pool, ln net.Listener, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg := base.Config()
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(ln.Addr().(*net.TCPAddr).Port)
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

func newStallProxy(t *testing.T, socket string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln, socket: socket, gate: make(chan struct{})}
	close(p.gate)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		p.resume()
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	pipe := func(dst, src net.Conn) {
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.wait()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("unix", socket)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			wg.Go(func() { pipe(s, c) })
			wg.Go(func() { pipe(c, s) })
		}
	})
	return p
}

// stall stops forwarding; resume forwards again, what was held first.
func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

func (p *stallProxy) wait() {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	<-g
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

// awaitClaimResolved waits until a claim whose outcome was unknown has
// been resolved (its resolver marked it abandoned: from then on it claims
// nothing, and whatever it had leased was handed back in the same
// transaction), then requires job id pending with no attempt counted.
func awaitClaimResolved(t *testing.T, base *pgxpool.Pool, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		require.NoError(t, base.QueryRow(context.Background(), "SELECT count(*) FROM leaserouter_abandoned_claims").Scan(&n))
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			st, attempt := jobState(t, base, id)
			t.Fatalf("the claim was not resolved within 10s: job %s is %v, attempt %d", id, st, attempt)
		}
	}
	st, attempt := jobState(t, base, id)
	require.Equal(t, leaserouter.StatePending, st, "the lease nobody received handed back")
	require.Zero(t, attempt, "the lease nobody received is no attempt")
}

// TestClaimWithLostReplyCountsNoAttempt: the server commits a claim whose
// reply never reaches the client (the connection is cut right after the
// execution was sent). The claim's outcome is resolved by reading the
// rows back: the lease nobody received is handed back with its attempt
// not counted, so a job with MaxAttempts 1 is leased again (attempt 1)
// and completes, rather than expiring dead without a handler ever
// running.
func TestClaimWithLostReplyCountsNoAttempt(t *testing.T) {
	base := pgtest.New(t)
	p := newCutProxy(t, socketOf(base), "nextval('leaserouter_token')")
	db := poolVia(t, base, p.ln, 0)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: time.Second, MaxAttempts: 1, PollInterval: 100 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	p.armed.Store(true)
	_, err := r.TryAcquire(ctx, "w")
	require.Error(t, err, "the reply was lost")
	require.EqualValues(t, 1, p.cut.Load(), "the claim's connection was cut after its execution was sent")
	awaitClaimResolved(t, base, "a")
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err, "the job is leased again, not dead")
	require.Equal(t, 1, l.Attempt, "the lost claim was no attempt")
	require.NoError(t, l.Complete(ctx))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
}

// claimByHand runs claim id's statements (its advisory lock, then the
// claim of one job of the default queue for worker "w") in tx, as a
// claim's batch does, and returns the IDs of the jobs it leased.
func claimByHand(t *testing.T, tx pgx.Tx, id int64) []string {
	t.Helper()
	lock, claim := pgrouter.ClaimStatements()
	_, err := tx.Exec(t.Context(), lock, pgx.NamedArgs{"id": id})
	require.NoError(t, err)
	rows, err := tx.Query(t.Context(), claim, pgx.NamedArgs{"queue": pgrouter.DefaultQueue, "n": 1, "worker": "w",
		"lease_us": time.Hour.Microseconds(), "claim": id})
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		ids = append(ids, vals[0].(string))
	}
	require.NoError(t, rows.Err())
	return ids
}

// TestClaimResolverWaitsForClaimInFlight: the resolver of a claim whose
// outcome is unknown waits for the claim's transaction if it is still
// running (the claim's advisory lock), so a claim that commits after the
// resolver began is still found and handed back, the attempt not
// counted.
func TestClaimResolverWaitsForClaimInFlight(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	const id = 42
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.Equal(t, []string{"a"}, claimByHand(t, tx, id), "the claim leased the job (not committed yet)")
	resolved := make(chan error, 1)
	go func() { resolved <- pgrouter.ResolveClaim(ctx, r, id) }()
	var early error
	returned := false
	eventually(t, 10*time.Second, "the resolver waiting for the claim's transaction (or done)", func() bool {
		select {
		case early = <-resolved:
			returned = true // did not wait: the check below fails
			return true
		default:
		}
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n))
		return n > 0
	})
	require.NoError(t, tx.Commit(ctx))
	if !returned {
		early = <-resolved
	}
	require.NoError(t, early)
	st, attempt := jobState(t, db, "a")
	require.Equal(t, leaserouter.StatePending, st, "the claim's lease handed back")
	require.Zero(t, attempt, "the lease nobody received is no attempt")
}

// TestAbandonedClaimArrivingLateClaimsNothing: a claim that reaches the
// server after its client resolved it (held in the network, say) claims
// nothing: no lease can be granted that nobody will receive.
func TestAbandonedClaimArrivingLateClaimsNothing(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	const id = 43
	require.NoError(t, pgrouter.ResolveClaim(ctx, r, id))
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.Empty(t, claimByHand(t, tx, id), "the abandoned claim leased nothing")
	require.NoError(t, tx.Commit(ctx))
	st, attempt := jobState(t, db, "a")
	require.Equal(t, leaserouter.StatePending, st)
	require.Zero(t, attempt)
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err, "other claims go on")
	require.Equal(t, "a", l.JobID)
}

// ctxLease is a lease duration far above the 1s the ctx tests allow a
// call to return in after its ctx ended: a call that waits for a lease's
// duration instead of its ctx is unambiguous on a busy machine.
const ctxLease = 10 * time.Second

// TestAcquireHonoursCtxWithPoolExhausted: Acquire whose claim waits for
// a connection of an exhausted pool returns ctx.Err() when its ctx ends
// (within 1s here; the library's own wait is a few ms), and claims
// nothing.
func TestAcquireHonoursCtxWithPoolExhausted(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	cfg.MaxConns = 1
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: ctxLease})
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	held, err := db.Acquire(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = r.Acquire(ctx, "w")
	late := time.Since(deadlineOf(ctx))
	held.Release()
	t.Logf("Acquire returned %v after its ctx ended (pool exhausted): %v", late, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, late, time.Second, "Acquire returns when its ctx ends")
	st, attempt := jobState(t, base, "a")
	require.Equal(t, leaserouter.StatePending, st)
	require.Zero(t, attempt)
}

// deadlineOf is ctx's deadline.
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// TestAcquireHonoursCtxWithServerStalled: Acquire whose claim was sent to
// a server that stalls returns ctx.Err() when its ctx ends (within 1s
// here); the claim's outcome, unknown then, is resolved in the background
// once the server answers again: the job is pending with no attempt
// counted, whether the claim ran late or never.
func TestAcquireHonoursCtxWithServerStalled(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, socketOf(base))
	db := poolVia(t, base, p.ln, 0)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: ctxLease, MaxAttempts: 1})
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	p.stall()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := r.Acquire(ctx, "w")
	late := time.Since(deadlineOf(ctx))
	t.Logf("Acquire returned %v after its ctx ended (server stalled): %v", late, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, late, time.Second, "Acquire returns when its ctx ends")
	p.resume()
	awaitClaimResolved(t, base, "a")
	l, err := r.TryAcquire(t.Context(), "w")
	require.NoError(t, err)
	require.Equal(t, 1, l.Attempt)
}

// TestCloseHonoursCtxWithServerStalled: Close with a lease still held and
// the server stalled returns ctx.Err() when its ctx ends (within 1s
// here), not after a revocation that waits for the server.
func TestCloseHonoursCtxWithServerStalled(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, socketOf(base))
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

// TestRunReturnsPromptlyAfterCtxWithServerStalled: Run whose ctx is
// canceled while the server stalls returns within 1s of the cancel once
// its handler (which honours its ctx) has returned; the release it could
// not make is made in the background once the server answers again.
func TestRunReturnsPromptlyAfterCtxWithServerStalled(t *testing.T) {
	base := pgtest.New(t)
	p := newStallProxy(t, socketOf(base))
	db := poolVia(t, base, p.ln, 0)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: ctxLease})
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{})
	var returned atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 2}, func(hctx context.Context, l *pgrouter.Lease[int]) error {
			close(started)
			<-hctx.Done()
			returned.Store(time.Now().UnixNano())
			return hctx.Err()
		})
	}()
	<-started
	p.stall()
	canceled := time.Now()
	cancel()
	err := <-done
	late := time.Since(canceled)
	t.Logf("Run returned %v after its ctx was canceled (server stalled; handler returned after %v): %v",
		late, time.Duration(returned.Load()-canceled.UnixNano()), err)
	require.NoError(t, err)
	require.Less(t, late, time.Second, "Run returns when its ctx ends and its handlers have returned")
	p.resume()
	eventually(t, 10*time.Second, "the job released in the background", func() bool {
		st, attempt := jobState(t, base, "a")
		return st == leaserouter.StatePending && attempt == 1
	})
}

// TestLeaseProvenFromClaimSendNotPoolWait: a Run worker whose claim
// waited for the pool's only connection (held elsewhere for most of a
// LeaseDuration) gets a lease proven for a LeaseDuration from the claim's
// send, not from before the wait: its handler's ctx is not canceled as
// unproven, and the attempt is not wasted.
func TestLeaseProvenFromClaimSendNotPoolWait(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	cfg.MaxConns = 1
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	const lease = 2 * time.Second
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: lease})
	require.NoError(t, r.Enqueue(t.Context(), "a", 1))
	held, err := db.Acquire(t.Context())
	require.NoError(t, err)
	// Heartbeat rounds at 1.2s (no lease yet: the claim waits for the
	// pool) and 2.4s; the connection is free at 1.5s. Proven from before
	// the wait, the lease would end at 2s, before any round could extend
	// it; proven from the send, at 3.5s.
	go func() {
		time.Sleep(1500 * time.Millisecond)
		held.Release()
	}()
	var canceled atomic.Value
	stop := make(chan struct{})
	err = runUntil(t, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: 1200 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			defer close(stop)
			select {
			case <-hctx.Done():
				canceled.Store(fmt.Sprint(context.Cause(hctx)))
				return hctx.Err()
			case <-time.After(time.Second):
				return nil
			}
		})
	require.NoError(t, err)
	require.Nil(t, canceled.Load(), "the handler's ctx was canceled although its lease was valid")
	j, _, err := r.Get(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	require.Equal(t, 1, j.Attempt)
}
