package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
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

// newClient returns a Client on db, stopped when t ends.
func newClient(t *testing.T, db *pgxpool.Pool, opts pgrouter.ClientOptions) *pgrouter.Client {
	t.Helper()
	c, err := pgrouter.NewClient(t.Context(), db, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
	return c
}

// drained waits, bounded by 60s, for c.Drained.
func drained(t *testing.T, c *pgrouter.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.Drained(ctx))
}

// report is a kind's payload (email, kind_test.go's, is another's).
type report struct{ Day int }

// TestClientRunsEachKindWithItsTypedHandler: two kinds on two queues,
// each job decoded into its kind's type and run by its handler inside the
// middleware, which sees the Attempt (kind, queue, job, attempt, token,
// metadata); Drained returns once both are done.
func TestClientRunsEachKindWithItsTypedHandler(t *testing.T) {
	db := pgtest.New(t)
	var mu sync.Mutex
	var attempts []leaserouter.Attempt
	var got []string
	mw := func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
		return next(ctx)
	}
	c := newClient(t, db, pgrouter.ClientOptions{
		Queues:     map[string]pgrouter.QueueConfig{"mail": {Workers: 2}, "reports": {Workers: 1}},
		Middleware: []leaserouter.Middleware{mw},
	})
	mails, err := pgrouter.Register(c, "email", func(ctx context.Context, l *pgrouter.Lease[email]) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, "email to "+l.Payload.To)
		return nil
	}, leaserouter.WithKindQueue("mail"))
	require.NoError(t, err)
	reports, err := pgrouter.Register(c, "report", func(ctx context.Context, l *pgrouter.Lease[report]) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprint("report of day ", l.Payload.Day))
		return nil
	}, leaserouter.WithKindQueue("reports"))
	require.NoError(t, err)
	require.Equal(t, "mail", mails.Queue())
	require.Equal(t, "report", reports.Name())
	ctx := t.Context()
	require.NoError(t, mails.Enqueue(ctx, "m1", email{To: "ann"}, leaserouter.WithMetadata(map[string]string{"tenant": "t1"})))
	require.NoError(t, reports.Enqueue(ctx, "r1", report{Day: 7}))
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []string{"email to ann", "report of day 7"}, got)
	require.Len(t, attempts, 2)
	for _, a := range attempts {
		require.Equal(t, 1, a.Attempt)
		require.NotZero(t, a.Token)
		switch a.JobID {
		case "m1":
			require.Equal(t, leaserouter.Attempt{Kind: "email", Queue: "mail", JobID: "m1", Attempt: 1, Token: a.Token,
				Metadata: map[string]string{"tenant": "t1"}}, a)
		case "r1":
			require.Equal(t, leaserouter.Attempt{Kind: "report", Queue: "reports", JobID: "r1", Attempt: 1, Token: a.Token}, a)
		default:
			t.Fatalf("attempt of an unknown job %q", a.JobID)
		}
	}
}

// TestClientPayloadThatDoesNotDecodeFailsTheAttempt: a job whose
// payload does not decode into its kind's type fails its attempt (as a
// Router's undecodable payload does), the error seen by the middleware;
// with MaxAttempts 1 it is dead, its handler never called.
func TestClientPayloadThatDoesNotDecodeFailsTheAttempt(t *testing.T) {
	db := pgtest.New(t)
	var seen atomic.Value
	c := newClient(t, db, pgrouter.ClientOptions{Options: pgrouter.Options{MaxAttempts: 1},
		Middleware: []leaserouter.Middleware{func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
			err := next(ctx)
			seen.Store(fmt.Sprint(err))
			return err
		}}})
	strs, err := pgrouter.Register(c, "s", func(context.Context, *pgrouter.Lease[string]) error { return nil })
	require.NoError(t, err)
	var ran atomic.Bool
	_, err = pgrouter.Register(c, "n", func(context.Context, *pgrouter.Lease[int]) error { ran.Store(true); return nil })
	require.NoError(t, err)
	// A string payload under kind "n", whose type is int: written through
	// kind "s", then relabeled in the table.
	require.NoError(t, strs.Enqueue(t.Context(), "bad", "not a number"))
	_, err = db.Exec(t.Context(), "UPDATE leaserouter_jobs SET kind = 'n' WHERE id = 'bad'")
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	drained(t, c)
	require.False(t, ran.Load(), "the handler of a payload that does not decode")
	j, ok, err := c.Queue(pgrouter.DefaultQueue).Get(t.Context(), "bad")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StateDead, j.State)
	require.Contains(t, j.LastError, "does not decode")
	require.Contains(t, seen.Load(), "does not decode")
}

// TestClientEnqueueTxCommitsAndRollsBackWithTheCallersTx: EnqueueTx and
// EnqueueManyTx write jobs only if the caller's transaction commits; a
// duplicate in the transaction is ErrDuplicate (and a duplicate index)
// and leaves it usable.
func TestClientEnqueueTxCommitsAndRollsBackWithTheCallersTx(t *testing.T) {
	db := pgtest.New(t)
	c := newClient(t, db, pgrouter.ClientOptions{})
	var mu sync.Mutex
	var ran []string
	k, err := pgrouter.Register(c, "k", func(ctx context.Context, l *pgrouter.Lease[int]) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, fmt.Sprint(l.JobID, "=", l.Payload))
		return nil
	})
	require.NoError(t, err)
	ctx := t.Context()
	q := c.Queue(pgrouter.DefaultQueue)
	exists := func(id string) bool {
		_, ok, err := q.Get(ctx, id)
		require.NoError(t, err)
		return ok
	}

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) // on a failure: the pool can close
	require.NoError(t, k.EnqueueTx(ctx, tx, "a", 1))
	_, err = k.EnqueueManyTx(ctx, tx, []leaserouter.JobSpec[int]{{ID: "b", Payload: 2}})
	require.NoError(t, err)
	require.False(t, exists("a"), "visible before the commit")
	require.NoError(t, tx.Rollback(ctx))
	require.False(t, exists("a"), "after the rollback")
	require.False(t, exists("b"), "after the rollback")

	tx2, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx2.Rollback(context.Background())
	tx = tx2
	require.NoError(t, k.EnqueueTx(ctx, tx, "a", 1))
	require.ErrorIs(t, k.EnqueueTx(ctx, tx, "a", 9), leaserouter.ErrDuplicate)
	dups, err := k.EnqueueManyTx(ctx, tx, []leaserouter.JobSpec[int]{{ID: "a", Payload: 9}, {ID: "b", Payload: 2}, {ID: "c", Payload: 3}})
	require.NoError(t, err, "the transaction is usable after a duplicate")
	require.Equal(t, []int{0}, dups)
	require.NoError(t, tx.Commit(ctx))
	for _, id := range []string{"a", "b", "c"} {
		j, ok, err := q.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, ok, id)
		require.Equal(t, "k", j.Kind, id)
	}
	require.NoError(t, c.Start(ctx))
	drained(t, c)
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []string{"a=1", "b=2", "c=3"}, ran)
}

// TestClientDeployClaimsOnlyRegisteredKinds: during a deploy, Client A
// registers kinds x and y, Client B (the old version) x only, on one
// queue. While only B runs, B runs the x job and never leases the y job
// (still pending, attempt 0: no attempt burned), and B's Drained counts
// only x; once A starts, A runs y, once.
func TestClientDeployClaimsOnlyRegisteredKinds(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	var xByB, xByA, yByA atomic.Int32
	a := newClient(t, db, pgrouter.ClientOptions{})
	ax, err := pgrouter.Register(a, "x", func(context.Context, *pgrouter.Lease[int]) error { xByA.Add(1); return nil })
	require.NoError(t, err)
	ay, err := pgrouter.Register(a, "y", func(context.Context, *pgrouter.Lease[int]) error { yByA.Add(1); return nil })
	require.NoError(t, err)
	b := newClient(t, db, pgrouter.ClientOptions{})
	_, err = pgrouter.Register(b, "x", func(context.Context, *pgrouter.Lease[int]) error { xByB.Add(1); return nil })
	require.NoError(t, err)

	require.NoError(t, ay.Enqueue(ctx, "y1", 1))
	require.NoError(t, ax.Enqueue(ctx, "x1", 1))
	require.NoError(t, b.Start(ctx))
	drained(t, b)
	require.Equal(t, int32(1), xByB.Load())
	state, attempt := jobState(t, db, "y1")
	require.Equal(t, leaserouter.StatePending, state, "the y job while only B runs")
	require.Zero(t, attempt, "an attempt burned on a kind B does not know")

	require.NoError(t, a.Start(ctx))
	drained(t, a)
	require.Equal(t, int32(1), yByA.Load())
	require.Zero(t, xByA.Load())
	state, attempt = jobState(t, db, "y1")
	require.Equal(t, leaserouter.StateSucceeded, state)
	require.Equal(t, 1, attempt)
}

// TestClientLifecycle: Start twice is an error wrapping
// ErrInvalidOptions; Register after Start likewise; Stop is idempotent;
// Start and Register after Stop, and Enqueue after it, return ErrClosed;
// Drained of a stopped Client with jobs left returns ErrClosed.
func TestClientLifecycle(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	c, err := pgrouter.NewClient(ctx, db, pgrouter.ClientOptions{})
	require.NoError(t, err)
	k, err := pgrouter.Register(c, "k", func(context.Context, *pgrouter.Lease[int]) error { return nil })
	require.NoError(t, err)
	_, err = pgrouter.Register(c, "k", func(context.Context, *pgrouter.Lease[int]) error { return nil })
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "a kind registered twice")
	_, err = pgrouter.Register[int](c, "nil", nil)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "a nil handler")
	_, err = pgrouter.Register(c, "q", func(context.Context, *pgrouter.Lease[int]) error { return nil }, leaserouter.WithKindQueue("nope"))
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "a queue not configured")
	require.ErrorIs(t, k.Enqueue(ctx, "j", 1, leaserouter.WithQueue("nope")), leaserouter.ErrInvalidJob)
	require.NoError(t, c.Start(ctx))
	require.ErrorIs(t, c.Start(ctx), leaserouter.ErrInvalidOptions)
	_, err = pgrouter.Register(c, "late", func(context.Context, *pgrouter.Lease[int]) error { return nil })
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "Register after Start")
	require.NoError(t, c.Stop(ctx))
	require.NoError(t, c.Stop(ctx))
	require.ErrorIs(t, c.Start(ctx), leaserouter.ErrClosed)
	require.ErrorIs(t, k.Enqueue(ctx, "j", 1), leaserouter.ErrClosed)
	// A job left: enqueued by another Client of the same kind, never run.
	other := newClient(t, db, pgrouter.ClientOptions{})
	ok, err := pgrouter.Register(other, "k", func(context.Context, *pgrouter.Lease[int]) error { return nil })
	require.NoError(t, err)
	require.NoError(t, ok.Enqueue(ctx, "left", 1))
	require.ErrorIs(t, c.Drained(ctx), leaserouter.ErrClosed)
}

// TestNewClientRefusesBadOptionsNamingTheQueue: a negative Workers or
// Timeout, a bad per-queue option, an invalid queue name and a nil
// middleware wrap ErrInvalidOptions, naming the queue.
func TestNewClientRefusesBadOptionsNamingTheQueue(t *testing.T) {
	db := pgtest.New(t)
	for name, tc := range map[string]struct {
		opts pgrouter.ClientOptions
		msg  string
	}{
		"negative Workers": {pgrouter.ClientOptions{Queues: map[string]pgrouter.QueueConfig{"q": {Workers: -1}}}, `queue "q": Workers`},
		"negative Timeout": {pgrouter.ClientOptions{Queues: map[string]pgrouter.QueueConfig{"q": {Timeout: -1}}}, `queue "q": Timeout`},
		"bad queue option": {pgrouter.ClientOptions{Queues: map[string]pgrouter.QueueConfig{"q": {Options: pgrouter.Options{MaxAttempts: -1}}}}, `(queue "q")`},
		"bad client option": {pgrouter.ClientOptions{Options: pgrouter.Options{LeaseDuration: -1},
			Queues: map[string]pgrouter.QueueConfig{"q": {}}}, `(queue "q")`},
		"bad queue name": {pgrouter.ClientOptions{Queues: map[string]pgrouter.QueueConfig{"a\x00b": {}}}, "queue name"},
		"nil middleware": {pgrouter.ClientOptions{Middleware: []leaserouter.Middleware{nil}}, "Middleware[0]"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pgrouter.NewClient(t.Context(), db, tc.opts)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			require.Contains(t, err.Error(), tc.msg)
		})
	}
	_, err := pgrouter.NewClient(t.Context(), nil, pgrouter.ClientOptions{})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "a nil pool")
}

// TestClientConnectionBudget: a Client with 10 kinds over 3 queues (8
// workers each, a KeepAlive in one kind's handler) on a pool of at most 4
// holds at most the pool's 4 plus 2 connections (pg_stat_activity,
// sampled every 5ms through a drain of 3,000 jobs). Today's shape of the
// same service, 2 Routers with a Run each on such a pool, is logged
// beside it.
func TestClientConnectionBudget(t *testing.T) {
	const maxConns = 4
	db := onlyPool(t, maxConns)
	c := newClient(t, db, pgrouter.ClientOptions{Options: pgrouter.Options{Retention: -1, NoVacuum: true},
		Queues: map[string]pgrouter.QueueConfig{"a": {Workers: 8}, "b": {Workers: 8}, "c": {Workers: 8}}})
	queues := c.QueueNames()
	var done atomic.Int64
	kinds := make([]*pgrouter.Kind[int], 10)
	for i := range kinds {
		h := func(ctx context.Context, l *pgrouter.Lease[int]) error { done.Add(1); return nil }
		if i == 0 {
			h = func(ctx context.Context, l *pgrouter.Lease[int]) error {
				_, stop := pgrouter.KeepAlive(ctx, l, 0)
				stop()
				done.Add(1)
				return nil
			}
		}
		k, err := pgrouter.Register(c, fmt.Sprint("kind-", i), h, leaserouter.WithKindQueue(queues[i%len(queues)]))
		require.NoError(t, err)
		kinds[i] = k
	}
	const perKind = 300
	for i, k := range kinds {
		specs := make([]leaserouter.JobSpec[int], perKind)
		for j := range specs {
			specs[j] = leaserouter.JobSpec[int]{ID: fmt.Sprint(i, "-", j), Payload: j}
		}
		_, err := k.EnqueueMany(t.Context(), specs)
		require.NoError(t, err)
	}
	s := sampleConns(t, db)
	require.NoError(t, c.Start(t.Context()))
	drained(t, c)
	most := s.end()
	require.Equal(t, int64(len(kinds)*perKind), done.Load())
	t.Logf("a Client, 10 kinds over 3 queues: most connections %d (pool max %d)", most, maxConns)

	// Today's shape: a Router and a Run per kind, here 2 of them.
	db2 := onlyPool(t, maxConns)
	s2 := sampleConns(t, db2)
	routers := make([]*pgrouter.Router[int], 2)
	for i := range routers {
		routers[i] = routerOn[int](t, db2, pgrouter.Options{Queue: fmt.Sprint("q", i), Retention: -1, NoVacuum: true})
		enqueueJobs(t, routers[i], "j", 300)
	}
	var g sync.WaitGroup
	for _, r := range routers {
		var left atomic.Int64
		left.Store(300)
		stop := make(chan struct{})
		g.Go(func() {
			require.NoError(t, runUntil(t, r, leaserouter.WorkerOptions{Workers: 8}, stop, func(context.Context, *pgrouter.Lease[int]) error {
				if left.Add(-1) == 0 {
					close(stop)
				}
				return nil
			}))
		})
	}
	g.Wait()
	t.Logf("2 Routers, a Run each: most connections %d (pool max %d)", s2.end(), maxConns)
	require.LessOrEqual(t, most, maxConns+2, "a Client's connections: the pool's plus a listener and a heartbeat connection")
}

// TestClientStopReturnsWithinItsCtx: Stop with a handler that ignores
// its ctx returns ctx.Err() soon after ctx's end (bounded generously: a
// busy machine), the lease revoked.
func TestClientStopReturnsWithinItsCtx(t *testing.T) {
	db := pgtest.New(t)
	c, err := pgrouter.NewClient(t.Context(), db, pgrouter.ClientOptions{})
	require.NoError(t, err)
	running := make(chan struct{})
	release := make(chan struct{})
	k, err := pgrouter.Register(c, "k", func(context.Context, *pgrouter.Lease[int]) error {
		close(running)
		<-release // ignores its ctx
		return nil
	})
	require.NoError(t, err)
	defer close(release)
	require.NoError(t, k.Enqueue(t.Context(), "j", 1))
	require.NoError(t, c.Start(t.Context()))
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.Stop(ctx)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "Stop: %v", err)
	require.Less(t, time.Since(start), 5*time.Second, "Stop's return after its ctx ended")
}

// TestClientNotMadeByNewClientIsAnError: every call of a nil or zero
// Client, and of the nil Queue Client.Queue returns for a queue it does
// not have, is an error wrapping ErrInvalidOptions (or a zero answer),
// never a panic.
func TestClientNotMadeByNewClientIsAnError(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]*pgrouter.Client{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, c.Start(ctx), leaserouter.ErrInvalidOptions)
			require.ErrorIs(t, c.Drained(ctx), leaserouter.ErrInvalidOptions)
			_, err := c.QueueStats(ctx)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			_, err = pgrouter.Register(c, "k", func(context.Context, *pgrouter.Lease[int]) error { return nil })
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			require.ErrorIs(t, c.Stop(ctx), leaserouter.ErrInvalidOptions)
			require.Empty(t, c.QueueNames())
			require.Nil(t, c.Queue(pgrouter.DefaultQueue))
		})
	}
	var q *pgrouter.Queue
	require.Empty(t, q.Name())
	require.Empty(t, q.Queue())
	_, err := q.Stats(ctx)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	_, err = q.List(ctx, leaserouter.ListParams{})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	_, _, err = q.Get(ctx, "a")
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	_, err = q.History(ctx)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	_, err = q.Leases(ctx, 1)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.ErrorIs(t, q.Retry(ctx, "a"), leaserouter.ErrInvalidOptions)
	require.ErrorIs(t, q.Cancel(ctx, "a"), leaserouter.ErrInvalidOptions)
	require.ErrorIs(t, q.Delete(ctx, "a"), leaserouter.ErrInvalidOptions)
	_, err = q.RetryMany(ctx, []string{"a"}, nil)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	_, err = q.CancelMany(ctx, []string{"a"}, nil)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	_, err = q.DeleteMany(ctx, []string{"a"}, nil)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.ErrorIs(t, q.Pause(ctx), leaserouter.ErrInvalidOptions)
	require.ErrorIs(t, q.Resume(ctx), leaserouter.ErrInvalidOptions)
}
