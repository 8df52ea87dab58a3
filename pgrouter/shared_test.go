package pgrouter_test

import (
	"context"
	"fmt"
	"strings"
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

// statementSeen signals, once, the first statement sent (Query, not a
// batch) whose text contains want.
type statementSeen struct {
	want string
	seen chan struct{}
	once atomic.Bool
}

func (s *statementSeen) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, s.want) && s.once.CompareAndSwap(false, true) {
		close(s.seen)
	}
	return ctx
}
func (s *statementSeen) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestRowHeldElsewhereNeverStallsTheSharedHeartbeats: the queues of a
// Client take turns on one heartbeat connection. Queue a's heartbeat
// round has a completion, or a hand-back of a job leased ahead, to send
// whose row another transaction holds for three of queue b's
// LeaseDurations from the moment the round sends it; meanwhile b's long
// handler keeps its lease (its ctx is never canceled), and once the row
// is let go a later round does what was left: the job runs once, at its
// first attempt (a's lease is long enough to outlive the wait; a
// completion or hand-back dropped or taken as done would show a second
// attempt, after the lease's expiry). Real time: the row lock is the
// database's; b's margin (three LeaseDurations) is generous.
func TestRowHeldElsewhereNeverStallsTheSharedHeartbeats(t *testing.T) {
	t.Run("completion", func(t *testing.T) { rowHeldElsewhere(t, false) })
	t.Run("hand-back", func(t *testing.T) { rowHeldElsewhere(t, true) })
}

// rowHeldElsewhere is TestRowHeldElsewhereNeverStallsTheSharedHeartbeats
// for a completion (job "a", its worker kept from the pool) or a
// hand-back (job "ahead", leased in a batch behind "a", whose handler
// runs meanwhile).
func rowHeldElsewhere(t *testing.T, handBack bool) {
	held, want := "a", "leaserouter_end_lease("
	if handBack {
		held, want = "ahead", "leaserouter_hand_back("
	}
	seen := &statementSeen{want: want, seen: make(chan struct{})}
	cfg := pgtest.New(t).Config().Copy()
	cfg.MaxConns = 2
	cfg.ConnConfig.Tracer = seen
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	const bLease = time.Second
	c := newClient(t, db, pgrouter.ClientOptions{Queues: map[string]pgrouter.QueueConfig{
		"a": {Workers: 1, Options: pgrouter.Options{LeaseDuration: 30 * time.Second}},
		"b": {Workers: 1, Options: pgrouter.Options{LeaseDuration: bLease}},
	}})
	var heldRan atomic.Int32
	aRuns, aEnd := make(chan struct{}, 1), make(chan struct{})
	a, err := pgrouter.Register(c, "a", func(ctx context.Context, l *pgrouter.Lease[int]) error {
		switch l.JobID {
		case held:
			heldRan.Add(1)
		case "quick":
			return nil
		}
		if l.JobID == "a" {
			aRuns <- struct{}{}
			<-aEnd
		}
		return nil
	}, leaserouter.WithKindQueue("a"))
	require.NoError(t, err)
	bRuns, bEnd := make(chan context.Context, 1), make(chan struct{})
	b, err := pgrouter.Register(c, "b", func(ctx context.Context, l *pgrouter.Lease[int]) error {
		bRuns <- ctx
		<-bEnd
		return nil
	}, leaserouter.WithKindQueue("b"))
	require.NoError(t, err)
	defer close(bEnd)
	ctx := t.Context()
	if handBack { // quick jobs first, so that the worker's batch grows to take "a" and "ahead" together
		for i := range 3 {
			require.NoError(t, a.Enqueue(ctx, fmt.Sprint("quick", i), 0, leaserouter.WithPriority(1)))
		}
	}
	require.NoError(t, a.Enqueue(ctx, "a", 1))
	if handBack {
		require.NoError(t, a.Enqueue(ctx, "ahead", 2))
	}
	require.NoError(t, b.Enqueue(ctx, "b", 1))
	require.NoError(t, c.Start(ctx))
	bctx := <-bRuns
	<-aRuns

	// The row held by another transaction, on a connection of its own.
	conn, err := pgx.ConnectConfig(ctx, db.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM leaserouter_jobs WHERE queue = 'a' AND id = $1 FOR UPDATE", held)
	require.NoError(t, err)
	var pool []*pgxpool.Conn
	if !handBack { // the pool held, so a's completion goes to its queue's heartbeat round
		for range 2 {
			pc, err := db.Acquire(ctx)
			require.NoError(t, err)
			pool = append(pool, pc)
		}
		close(aEnd)
	}
	release := func() {
		for _, pc := range pool {
			pc.Release()
		}
		pool = nil
	}
	defer release()

	select {
	case <-seen.seen: // a's round sent it
	case <-time.After(60 * time.Second):
		t.Fatal("queue a's heartbeat round never sent its statement")
	}
	select {
	case <-bctx.Done():
		t.Fatalf("b's handler canceled while a row of queue a was held elsewhere: %v", context.Cause(bctx))
	case <-time.After(3 * bLease):
	}

	require.NoError(t, tx.Rollback(ctx))
	release()
	if handBack {
		close(aEnd)
	}
	eventually(t, 20*time.Second, held+" completed", func() bool {
		j, ok, err := c.Queue("a").Get(ctx, held)
		require.NoError(t, err)
		return ok && j.State == leaserouter.StateSucceeded
	})
	j, _, err := c.Queue("a").Get(ctx, held)
	require.NoError(t, err)
	require.Equal(t, 1, j.Attempt, "%s completed at its first attempt", held)
	require.Equal(t, int32(1), heldRan.Load(), "%s's handler ran once", held)
	require.NoError(t, context.Cause(bctx))
}
