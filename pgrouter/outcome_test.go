package pgrouter_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// holdProxy forwards TCP connections to a PostgreSQL server. Armed
// with a marker, it catches the client message that follows the one
// holding marker (pgx prepares a statement, then executes it): the
// execution. Caught with forward, the execution goes on to the server at
// once and the client's side is cut when the test calls cut; without, the
// client's side is cut at once and the execution is held until the test
// calls release, then sent to the server on the same server connection.
// Either way the client never sees an answer: an unknown outcome, and the
// test decides when the statement reaches the server relative to the
// client's resolution. CancelRequests (pgx sends one when a connection
// fails) are dropped, as a cut network would lose them: they would
// otherwise cancel the statement the test keeps running. After the cut the
// proxy ends the server connection with a Terminate, which the server
// reads after the execution: done reports that the server has dealt with
// the execution (answered it, or found the connection gone).
type holdProxy struct {
	ln      net.Listener
	cancels atomic.Int64 // CancelRequests dropped

	mu      sync.Mutex
	marker  []byte // armed: the marker to catch; nil when disarmed
	forward bool

	caught   chan struct{} // closed when the execution is caught
	cutCh    chan struct{} // closed by cut (forward)
	released chan struct{} // closed by release (held)
	done     chan struct{} // closed when the caught connection's server side ended
}

// terminate is the protocol's Terminate message.
var terminate = []byte{'X', 0, 0, 0, 4}

func newHoldProxy(t *testing.T, server dialer) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &holdProxy{ln: ln}
	var wg sync.WaitGroup
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		if p.released != nil {
			closeOnce(p.released)
			closeOnce(p.cutCh)
		}
		p.mu.Unlock()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			conns = append(conns, c)
			cmu.Unlock()
			wg.Go(func() {
				p.serve(c, server, &wg, func(s net.Conn) { cmu.Lock(); conns = append(conns, s); cmu.Unlock() })
			})
		}
	})
	return p
}

// serve forwards client connection c to a new connection to the server
// (reported to track), or drops it if it carries a CancelRequest.
func (p *holdProxy) serve(c net.Conn, server dialer, wg *sync.WaitGroup, track func(net.Conn)) {
	head := make([]byte, 8) // the first message's length and code
	if _, err := io.ReadFull(c, head); err != nil {
		c.Close()
		return
	}
	if binary.BigEndian.Uint32(head[4:]) == cancelRequestCode {
		p.cancels.Add(1)
		c.Close() // lost in the cut network, as the reply is
		return
	}
	s, err := server()
	if err != nil {
		c.Close()
		return
	}
	track(s)
	if _, err := s.Write(head); err != nil {
		c.Close()
		s.Close()
		return
	}
	ended := make(chan struct{})
	wg.Go(func() {
		defer close(ended)
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				_, _ = c.Write(buf[:n]) // after a cut the client is gone: the server's answers are dropped
			}
			if err != nil {
				c.Close()
				return
			}
		}
	})
	defer s.Close()
	defer c.Close()
	buf := make([]byte, 64<<10)
	prepared := false // the statement holding marker was prepared: its execution comes next
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if prepared {
				p.handle(c, s, bytes.Clone(buf[:n]), ended)
				return
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
			p.mu.Lock()
			prepared = p.marker != nil && bytes.Contains(buf[:n], p.marker)
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// cancelRequestCode is the protocol's CancelRequest code.
const cancelRequestCode = 80877102

// arm makes the proxy catch the next execution of a statement holding
// marker (see holdProxy).
func (p *holdProxy) arm(marker string, forward bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.forward = []byte(marker), forward
	p.caught, p.cutCh, p.released, p.done = make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
}

// handle deals with the caught execution exec of client c, server s;
// ended is closed when s's answers end.
func (p *holdProxy) handle(c, s net.Conn, exec []byte, ended chan struct{}) {
	p.mu.Lock()
	p.marker = nil
	forward, caught, cutCh, released, done := p.forward, p.caught, p.cutCh, p.released, p.done
	p.mu.Unlock()
	defer func() {
		<-ended
		close(done)
	}()
	if forward {
		_, err := s.Write(exec)
		close(caught)
		<-cutCh
		c.Close()
		if err == nil {
			_, _ = s.Write(terminate)
		}
		return
	}
	c.Close()
	close(caught)
	<-released
	if _, err := s.Write(exec); err == nil {
		_, _ = s.Write(terminate)
	}
}

// cut cuts the client's side of a forwarded execution; release sends a
// held one to the server.
func (p *holdProxy) cut()     { closeOnce(p.cutCh) }
func (p *holdProxy) release() { closeOnce(p.released) }

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// await waits for ch (bounded by 10s).
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("not within 10s: %s", what)
	}
}

// endingOps are the lease operations that end a lease, each with a
// marker from its statement (one for all: every end of a lease goes
// through leases_end.sql, whose call of leaserouter_end_lease takes its
// reason as a parameter; settle_expired.sql's passes a literal), the job state it leaves (a first attempt of
// MaxAttempts 3, with the default backoff), the attempt count it leaves
// (a snooze's is not counted) and the reason a later operation is refused
// with.
const endMarker = "leaserouter_end_lease($"

var endingOps = []struct {
	name    string
	marker  string
	state   leaserouter.State
	attempt int
	reason  leaserouter.LostReason
	call    func(context.Context, *pgrouter.Lease[int]) error
}{
	{"Complete", endMarker, leaserouter.StateSucceeded, 1, leaserouter.LostCompleted,
		func(ctx context.Context, l *pgrouter.Lease[int]) error { return l.Complete(ctx) }},
	{"Fail", endMarker, leaserouter.StateScheduled, 1, leaserouter.LostFailed,
		func(ctx context.Context, l *pgrouter.Lease[int]) error { return l.Fail(ctx, errors.New("boom")) }},
	{"Release", endMarker, leaserouter.StatePending, 1, leaserouter.LostReleased,
		func(ctx context.Context, l *pgrouter.Lease[int]) error { return l.Release(ctx) }},
	{"Snooze", endMarker, leaserouter.StateScheduled, 0, leaserouter.LostSnoozed,
		func(ctx context.Context, l *pgrouter.Lease[int]) error { return l.Snooze(ctx, time.Hour) }},
}

// waitingFor reports whether a backend of db's server waits for a lock
// of type kind (pg_stat_activity's wait_event: "tuple", "transactionid",
// "advisory", ...), its query holding like (a LIKE pattern).
func waitingFor(t *testing.T, db *pgxpool.Pool, kind, like string) bool {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND wait_event = ANY($1) AND query LIKE $2`,
		[]string{kind}, like).Scan(&n))
	return n > 0
}

// TestUnknownCommitOutcome: the connection of a Complete (Fail, Release)
// is cut after the server got the statement, while the statement still
// waits there (another transaction holds the job's row; the cancel pgx
// sends is lost with the connection); the client's
// resolution of the unknown outcome does not report before the statement
// has run: once the row is let go and the statement commits, the call
// returns nil, and the operation took effect once (a second Complete is
// refused with the reason the first left).
func TestUnknownCommitOutcome(t *testing.T) {
	for _, op := range endingOps {
		t.Run(op.name, func(t *testing.T) {
			base := pgtest.New(t)
			p := newHoldProxy(t, serverInTheClear(t, base))
			db := poolVia(t, base, p.ln, 0)
			r := routerOn[int](t, db, pgrouter.Options{MaxAttempts: 3})
			ctx := t.Context()
			l := leaseOn(t, r, "a")
			blocker, err := base.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = blocker.Rollback(ctx) }()
			_, err = blocker.Exec(ctx, "SELECT FROM leaserouter_jobs WHERE id = 'a' FOR UPDATE")
			require.NoError(t, err)

			p.arm(op.marker, true)
			done := make(chan error, 1)
			go func() { done <- op.call(ctx, l) }()
			await(t, p.caught, "the statement sent")
			eventually(t, 10*time.Second, "the statement waiting at the server for the job's row", func() bool {
				return waitingFor(t, base, "transactionid", "%FOR UPDATE%") || waitingFor(t, base, "tuple", "%FOR UPDATE%")
			})
			p.cut()
			// The statement still waits for the row: a resolution that
			// reads the row now sees the lease valid, and would report
			// the error although the statement commits once the row is
			// let go. Let go of it only once the resolution waits for
			// the statement (or returned: then it did not wait).
			var early error
			returned := false
			eventually(t, 10*time.Second, op.name+" resolving its outcome, waiting for the statement (or returned)", func() bool {
				select {
				case early = <-done:
					returned = true
					return true
				default:
				}
				return waitingFor(t, base, "advisory", "%")
			})
			require.False(t, returned, "%s returned before the statement it sent had run: %v", op.name, early)
			require.NoError(t, blocker.Rollback(ctx))
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not return within 10s of the statement's commit", op.name)
			}
			require.NoError(t, err, "resolved: the row shows the lease ended as asked")
			t.Logf("%s returned nil after its statement committed (cancel requests dropped: %d)", op.name, p.cancels.Load())
			st, attempt := jobState(t, base, "a")
			require.Equal(t, op.state, st)
			require.Equal(t, op.attempt, attempt)
			var lost *leaserouter.LeaseLostError
			require.ErrorAs(t, l.Complete(ctx), &lost, "ended once: a second operation is refused")
			require.Equal(t, op.reason, lost.Reason)
		})
	}
}

// TestCutOperationNeverReachingServerTakesNoEffect: the connection of a
// Complete (Fail, Release) is cut before the statement reached the
// server (delayed in the network); the call reports the driver's error (not
// a lost lease), and that answer is final: when the statement reaches
// the server afterwards it changes nothing, and the lease is still valid
// (a heartbeat is accepted and the operation, tried again, takes effect).
func TestCutOperationNeverReachingServerTakesNoEffect(t *testing.T) {
	for _, op := range endingOps {
		t.Run(op.name, func(t *testing.T) {
			base := pgtest.New(t)
			p := newHoldProxy(t, serverInTheClear(t, base))
			db := poolVia(t, base, p.ln, 0)
			r := routerOn[int](t, db, pgrouter.Options{MaxAttempts: 3})
			ctx := t.Context()
			l := leaseOn(t, r, "a")

			p.arm(op.marker, false)
			err := op.call(ctx, l)
			await(t, p.caught, "the statement caught")
			require.Error(t, err, "the connection was cut: nothing done")
			require.NotErrorIs(t, err, leaserouter.ErrLeaseLost, "a cut connection is not a lost lease")
			p.release()
			await(t, p.done, "the server dealt with the statement that arrived late")
			st, attempt := jobState(t, base, "a")
			require.Equal(t, leaserouter.StateLeased, st, "the statement that arrived late changed nothing")
			require.Equal(t, 1, attempt)
			require.NoError(t, l.Heartbeat(ctx, nil), "the lease is still valid")
			require.NoError(t, op.call(ctx, l), "tried again, it takes effect")
			st, _ = jobState(t, base, "a")
			require.Equal(t, op.state, st)
		})
	}
}

// TestUnknownOutcomeResolutionHonoursCtx: a Complete whose statement
// still waits at the server when its ctx ends (the job's row held by
// another transaction; the cancel pgx sends lost in the network) returns
// the error within 1s of its ctx's end (the library allows its
// resolution 40ms): the resolution, which would have to wait for the
// statement, is given up rather than blocking the caller. The outcome
// stays unknown (here the statement commits later), and a retry tells.
func TestUnknownOutcomeResolutionHonoursCtx(t *testing.T) {
	base := pgtest.New(t)
	p := newHoldProxy(t, serverInTheClear(t, base))
	db := poolVia(t, base, p.ln, 0)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: ctxLease})
	l := leaseOn(t, r, "a")
	blocker, err := base.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(t.Context()) }()
	_, err = blocker.Exec(t.Context(), "SELECT FROM leaserouter_jobs WHERE id = 'a' FOR UPDATE")
	require.NoError(t, err)
	p.arm(endMarker, true) // forwarded; the client's side never cut by the proxy
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Complete(ctx) }()
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Complete did not return within 5s (its ctx ended after 300ms)")
	}
	late := time.Since(deadlineOf(ctx))
	t.Logf("Complete returned %v after its ctx ended (its statement waiting for the row): %v", late, err)
	p.cut() // the proxy's side of the connection pgx closed
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, late, time.Second, "Complete returns when its ctx ends")
	require.True(t, waitingFor(t, base, "transactionid", "%FOR UPDATE%") || waitingFor(t, base, "tuple", "%FOR UPDATE%"),
		"the statement still waits at the server")
	require.NoError(t, blocker.Rollback(t.Context()))
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, l.Complete(t.Context()), &lost, "a retry tells: the first Complete took effect after all")
	require.Equal(t, leaserouter.LostCompleted, lost.Reason)
}
