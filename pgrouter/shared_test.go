package pgrouter_test

import (
	"context"
	"fmt"
	"strings"
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

// seenPool returns a pool of two connections on a fresh database whose
// statements seen watches, closed when t ends.
func seenPool(t *testing.T, seen *statementSeen) *pgxpool.Pool {
	cfg := pgtest.New(t).Config().Copy()
	cfg.MaxConns = 2
	cfg.ConnConfig.Tracer = seen
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// TestRowHeldElsewhereNeverStallsTheSharedHeartbeats: the queues of a
// Client take turns on one heartbeat connection. Queue a's heartbeat
// round has a completion, or a hand-back of a job leased ahead, to send
// whose row another transaction holds for three of queue b's
// LeaseDurations from the moment the round sends it; meanwhile b's long
// handler keeps its lease (its ctx is never canceled), and once the row
// is let go a round soon after does what was left (within 5s, where a's
// next regular round is 9s away: the rounds of a, every 15s, are the
// only ones that send the statement, 6s before the row is let go): the
// job runs once, at its first attempt (a's
// lease is long enough to outlive the wait; a completion or hand-back
// dropped or taken as done would show a second attempt, after the
// lease's expiry). Real time: the row lock is the database's; b's margin
// (a hold of three LeaseDurations, b canceled after about 1.3s without a
// heartbeat) is generous.
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
	db := seenPool(t, seen)
	const bLease = 2 * time.Second
	c := newClient(t, db, pgrouter.ClientOptions{Queues: map[string]pgrouter.QueueConfig{
		"a": {Workers: 1, Options: pgrouter.Options{LeaseDuration: 45 * time.Second}},
		"b": {Workers: 1, Options: pgrouter.Options{LeaseDuration: bLease}},
	}})
	var heldRan atomic.Int32
	aRuns, aEnd := make(chan struct{}, 1), make(chan struct{})
	var endA sync.Once
	defer endA.Do(func() { close(aEnd) }) // a failure before it is let go
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
		endA.Do(func() { close(aEnd) })
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
	endA.Do(func() { close(aEnd) })
	eventually(t, 5*time.Second, held+" completed soon after its row was let go", func() bool {
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

// TestSkippedCompletionEndedAlreadyIsNoRefusal: a completion whose
// earlier statement committed but whose reply was lost is tried again by
// a heartbeat round while another transaction holds the row (FOR KEY
// SHARE: a foreign key check of a caller's table, say). The round leaves
// it for a later round (whose statement accepts it as done); it is no
// stale rejection.
func TestSkippedCompletionEndedAlreadyIsNoRefusal(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: 30 * time.Second})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "x", 1))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	ls := []*pgrouter.Lease[int]{l}
	require.NoError(t, pgrouter.CompleteUnread(ctx, r, ls))
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(ctx, "SELECT 1 FROM leaserouter_jobs WHERE id = 'x' FOR KEY SHARE")
	require.NoError(t, err)
	later, ok := pgrouter.CompleteSkipping(ctx, r, ls)
	require.True(t, ok)
	require.Equal(t, 1, later, "left for a later round")
	st, err := r.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.StaleRejections, "a completion that committed counted as a stale rejection")
	require.NoError(t, tx.Rollback(ctx))
	later, ok = pgrouter.CompleteSkipping(ctx, r, ls)
	require.True(t, ok)
	require.Zero(t, later)
	st, err = r.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.StaleRejections, "accepted as done once the row was let go")
}

// TestSkippedCompletionOfAnExpiredLeaseIsRefusedAtOnce: a finished
// lease's completion is skipped while another transaction holds its row,
// and the lease expires meanwhile. Once the row is let go, the next round
// refuses it (a stale rejection) at once, not at every round until
// something settles the expiry (nothing can here: the pool is held, and
// PollInterval far away): the row read without a lock still shows the
// lease, expired.
func TestSkippedCompletionOfAnExpiredLeaseIsRefusedAtOnce(t *testing.T) {
	seen := &statementSeen{want: "leaserouter_end_lease(", seen: make(chan struct{})}
	db := seenPool(t, seen)
	var stale atomic.Int32
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 2 * time.Second, PollInterval: time.Minute,
		OnEvent: func(e leaserouter.Event) {
			if e.Kind == leaserouter.EventStaleRejected {
				stale.Add(1)
			}
		}})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	started, finish := make(chan time.Time, 1), make(chan struct{})
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- r.Run(rctx, leaserouter.WorkerOptions{Workers: 1}, func(ctx context.Context, l *pgrouter.Lease[int]) error {
			started <- l.Expiry()
			<-finish
			return nil
		})
	}()
	defer func() {
		stop()
		require.NoError(t, <-ran)
	}()
	expiry := <-started
	conn, err := pgx.ConnectConfig(ctx, db.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM leaserouter_jobs WHERE id = 'a' FOR UPDATE")
	require.NoError(t, err)
	var pool []*pgxpool.Conn // held: the completion goes to a heartbeat round
	for range 2 {
		pc, err := db.Acquire(ctx)
		require.NoError(t, err)
		pool = append(pool, pc)
	}
	release := func() {
		for _, pc := range pool {
			pc.Release()
		}
		pool = nil
	}
	defer release()
	close(finish)
	select {
	case <-seen.seen:
	case <-time.After(20 * time.Second):
		t.Fatal("no heartbeat round sent the completion")
	}
	eventually(t, 20*time.Second, "the lease expired on the database's clock", func() bool {
		var past bool
		require.NoError(t, tx.QueryRow(ctx, "SELECT clock_timestamp() > $1::timestamptz", expiry).Scan(&past))
		return past
	})
	require.NoError(t, tx.Rollback(ctx))
	// The pool still held: nothing but the heartbeat rounds can touch the
	// row (no claim, no settling of the expiry).
	eventually(t, 5*time.Second, "the expired lease's completion refused", func() bool { return stale.Load() == 1 })
}
