package pgrouter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// TestRunSurvivesServerRestart: the server stops (a fast shutdown, then a
// crash) while Run works and starts again; Run goes on by itself and
// every job ends succeeded, none lost.
func TestRunSurvivesServerRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprint("crash=", crash), func(t *testing.T) {
			c := pgtest.NewCluster(t)
			db := c.Pool(t)
			r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 2 * time.Second, PollInterval: 200 * time.Millisecond})
			ctx := t.Context()
			const n = 300
			enqueueJobs(t, r, "j", n)

			var ran atomic.Int64
			restarted := make(chan struct{})
			var once sync.Once
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- r.Run(rctx, leaserouter.WorkerOptions{Workers: 2, HeartbeatInterval: 300 * time.Millisecond},
					func(hctx context.Context, l *pgrouter.Lease[int]) error {
						if ran.Add(1) == n/3 {
							once.Do(func() {
								go func() {
									require.NoError(t, c.Stop(crash))
									require.NoError(t, c.Start(context.Background()))
									close(restarted)
								}()
							})
						}
						if ran.Load() >= n/3 {
							// Jobs in flight across the restart: their
							// leases cannot be proven while the server is
							// down, so their contexts end (or the restart
							// comes first).
							select {
							case <-restarted:
							case <-hctx.Done():
							}
						}
						return hctx.Err()
					})
			}()
			select {
			case <-restarted:
			case <-time.After(60 * time.Second):
				t.Fatal("no restart")
			}
			eventually(t, 60*time.Second, "every job succeeded after the restart", func() bool {
				var left int
				err := db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE state <> 'succeeded'").Scan(&left)
				return err == nil && left == 0
			})
			cancel()
			require.NoError(t, <-done)
			var succeeded int
			require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE state = 'succeeded'").Scan(&succeeded))
			require.Equal(t, n, succeeded, "none lost")
			require.Greater(t, ran.Load(), int64(n/3), "jobs ran after the restart")
		})
	}
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

// TestConnectionDroppedMidCall: the server ends a Complete's connection
// while the statement waits; the call returns the driver's error (not a
// success it cannot prove), nothing changed, and the lease still
// completes on a retry.
func TestConnectionDroppedMidCall(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: time.Hour})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	blocker, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(ctx, "SELECT FROM leaserouter_jobs WHERE id = 'a' FOR UPDATE")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- l.Complete(ctx) }()
	var pid int
	eventually(t, 10*time.Second, "Complete waiting for the row", func() bool {
		err := db.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%leaserouter_jobs%'`).Scan(&pid)
		return err == nil
	})
	var killed bool
	require.NoError(t, db.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&killed))
	require.True(t, killed)
	err = <-done
	require.Error(t, err)
	require.NotErrorIs(t, err, leaserouter.ErrLeaseLost, "a dropped connection is not a lost lease")
	require.NoError(t, blocker.Rollback(ctx))
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateLeased, j.State, "nothing changed")
	require.NoError(t, l.Complete(ctx), "the lease is still valid: a retry completes it")
}

// TestRunCancelsHandlerWhenLeaseUnproven: the database goes away while a
// handler runs; once LeaseDuration has passed since the last accepted
// heartbeat was sent, the handler's ctx is canceled (its lease can no
// longer be proven valid), and after the server is back the job runs
// again and completes.
func TestRunCancelsHandlerWhenLeaseUnproven(t *testing.T) {
	c := pgtest.NewCluster(t)
	db := c.Pool(t)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 500 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	causes := make(chan error, 2)
	server := make(chan error, 4) // the handler's server stop and start, checked in the test's goroutine
	stop := make(chan struct{})
	err := runUntil(t, r, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: 100 * time.Millisecond}, stop,
		func(hctx context.Context, l *pgrouter.Lease[int]) error {
			if l.Attempt > 1 {
				close(stop)
				return nil
			}
			server <- c.Stop(false)
			select { // LeaseDuration (500ms) from the last accepted heartbeat at most
			case <-hctx.Done():
			case <-time.After(10 * time.Second):
			}
			causes <- context.Cause(hctx)
			server <- c.Start(context.Background())
			return hctx.Err()
		})
	require.NoError(t, err)
	require.NoError(t, <-server, "stop the server")
	require.NoError(t, <-server, "start it again")
	cause := <-causes
	require.ErrorIs(t, cause, leaserouter.ErrLeaseLost, "canceled as unproven")
	var lost *leaserouter.LeaseLostError
	require.False(t, errors.As(cause, &lost), "not a refusal the database gave: it could not be asked")
	eventually(t, 10*time.Second, "the job succeeded on a later attempt", func() bool {
		j, _, err := r.Get(ctx, "a")
		return err == nil && j.State == leaserouter.StateSucceeded && j.Attempt >= 2
	})
}

// TestRunHeartbeatConnectionReplacedAfterRestart: the heartbeat
// goroutine's own connection dies with a server restart and is made again
// even while no handler runs, so a finished job left to the heartbeat is
// completed: it never runs twice. The lease (8s) outlasts a restart on a
// busy machine by far, so the test depends on what the Router does, not on
// how fast the server comes back: without a new connection the finished
// job would wait for its expiry and run again (attempt 2).
func TestRunHeartbeatConnectionReplacedAfterRestart(t *testing.T) {
	c := pgtest.NewCluster(t)
	db := c.Pool(t)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 8 * time.Second, PollInterval: 100 * time.Millisecond})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	var runs atomic.Int64
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	restarted := make(chan struct{})
	go func() {
		done <- r.Run(rctx, leaserouter.WorkerOptions{Workers: 1, HeartbeatInterval: 100 * time.Millisecond},
			func(hctx context.Context, l *pgrouter.Lease[int]) error {
				if runs.Add(1) == 1 {
					time.Sleep(300 * time.Millisecond) // a few heartbeat rounds on the Run's own connection
					require.NoError(t, c.Stop(false))
					go func() {
						defer close(restarted)
						time.Sleep(700 * time.Millisecond)
						require.NoError(t, c.Start(context.Background()))
					}()
				}
				return nil
			})
	}()
	<-restarted
	eventually(t, 30*time.Second, "the finished job completed after the restart", func() bool {
		j, _, err := r.Get(ctx, "a")
		return err == nil && j.State == leaserouter.StateSucceeded
	})
	cancel()
	require.NoError(t, <-done)
	j, _, err := r.Get(ctx, "a")
	require.NoError(t, err)
	t.Logf("job a: %v, attempt %d; handler ran %d times", j.State, j.Attempt, runs.Load())
	require.Equal(t, 1, j.Attempt, "completed on its first lease")
	require.EqualValues(t, 1, runs.Load(), "the job finished once, before its lease's end")
}

// TestGetOnLastConnection: Get, settling an expired lease, gives its
// connection back before it notifies: on a pool of one it does not wait
// for itself.
func TestGetOnLastConnection(t *testing.T) {
	base := pgtest.New(t)
	cfg := base.Config()
	cfg.MaxConns = 1
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close) // after the Router's Close
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 50 * time.Millisecond, PollInterval: time.Hour})
	ctx := t.Context()
	l := leaseOn(t, r, "a")
	awaitDBTime(t, base, l.Expiry())
	// A wait for a connection (its own, not given back) would last until
	// cctx's end.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, ok, err := r.Get(cctx, "a")
	t.Logf("Get: %v %v %v", j.State, ok, err)
	require.NoError(t, err)
	require.NoError(t, cctx.Err(), "Get waited for the connection it had not given back")
}

// cutProxy forwards TCP connections to a PostgreSQL Unix socket and, when
// armed, closes a connection right after forwarding the client message
// that follows the one holding marker (pgx prepares a statement, then
// executes it): the server gets the execution (and commits it) but the
// client never sees the answer — an unknown COMMIT outcome.
type cutProxy struct {
	ln     net.Listener
	socket string
	marker []byte
	armed  atomic.Bool
	cut    atomic.Int64
	// blackout: after the cut, refuse every connection while down is set
	// (the database unreachable from the client).
	blackout, down atomic.Bool
}

func newCutProxy(t *testing.T, socket, marker string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, socket: socket, marker: []byte(marker)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.down.Load() {
				c.Close()
				continue
			}
			s, err := net.Dial("unix", socket)
			if err != nil {
				c.Close()
				continue
			}
			wg.Go(func() { _, _ = io.Copy(c, s); c.Close() })
			wg.Go(func() {
				defer s.Close()
				defer c.Close()
				buf := make([]byte, 64<<10)
				prepared := false // the statement holding marker was prepared: its execution comes next
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
						if prepared {
							p.armed.Store(false)
							p.down.Store(p.blackout.Load())
							p.cut.Add(1)
							return // the server has the execution; the client loses the answer
						}
						prepared = p.armed.Load() && bytes.Contains(buf[:n], p.marker)
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return p
}
