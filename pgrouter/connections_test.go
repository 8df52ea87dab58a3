package pgrouter_test

import (
	"context"
	"fmt"
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

// connSampler counts, every 5ms from a connection of its own (not
// counted), the client connections to db's database, and keeps the
// highest count seen.
type connSampler struct {
	most atomic.Int64
	stop context.CancelFunc
	done chan struct{}
}

// sampleConns starts a connSampler on db's database; it stops when t ends
// or at its stop.
func sampleConns(t *testing.T, db *pgxpool.Pool) *connSampler {
	t.Helper()
	conn, err := pgx.ConnectConfig(t.Context(), db.Config().ConnConfig.Copy())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &connSampler{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			var n int64
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n); err == nil {
				if n > s.most.Load() {
					s.most.Store(n)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { s.end() })
	return s
}

// end stops the sampler and returns the highest count seen.
func (s *connSampler) end() int {
	s.stop()
	<-s.done
	return int(s.most.Load())
}

// onlyPool returns a pool of at most conns connections on a fresh
// database (migrated), closed when t ends, and no other connection to
// that database open.
func onlyPool(t *testing.T, conns int32) *pgxpool.Pool {
	t.Helper()
	db0 := pgtest.New(t)
	cfg := db0.Config().Copy()
	db0.Close()
	cfg.MaxConns = conns
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// runHolding runs runs Runs of r (one worker each) over as many jobs,
// each handler keeping its lease alive with KeepAlive too, and calls
// during once every handler runs and r has counted at least heartbeats
// heartbeats; then the handlers return and the Runs stop.
func runHolding(t *testing.T, r *pgrouter.Router[int], runs, heartbeats int, during func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	enqueueJobs(t, r, "held-", runs)
	var running atomic.Int32
	release := make(chan struct{})
	var g sync.WaitGroup
	for i := range runs {
		g.Go(func() {
			err := r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, WorkerID: fmt.Sprint("run-", i)},
				func(hctx context.Context, l *pgrouter.Lease[int]) error {
					kctx, stop := pgrouter.KeepAlive(hctx, l, 0)
					defer stop()
					running.Add(1)
					select {
					case <-release:
					case <-kctx.Done():
					}
					return nil
				})
			require.NoError(t, err)
		})
	}
	eventually(t, 20*time.Second, "every handler running, the leases heartbeated", func() bool {
		st, err := r.Stats(t.Context())
		require.NoError(t, err)
		return int(running.Load()) == runs && st.Heartbeats >= uint64(heartbeats)
	})
	during()
	close(release)
	cancel()
	g.Wait()
}

// TestRouterHoldsTwoConnectionsOutsideItsPool: however many Runs and
// KeepAlives, a Router's connections are its pool's plus two of its own,
// the listener and the heartbeat connection (every Run's heartbeat
// rounds and KeepAlive's take turns on it), never one per Run.
func TestRouterHoldsTwoConnectionsOutsideItsPool(t *testing.T) {
	const maxConns, runs = 2, 3
	db := onlyPool(t, maxConns)
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: 600 * time.Millisecond, NoVacuum: true})
	s := sampleConns(t, db)
	// 3 rounds' worth for each lease: every Run's heartbeat goroutine and
	// the KeepAlive goroutine have sent theirs.
	runHolding(t, r, runs, 3*runs*2, func() {})
	most := s.end()
	t.Logf("most connections: %d (pool max %d, %d Runs with KeepAlive)", most, maxConns, runs)
	require.LessOrEqual(t, most, maxConns+2, "connections: the pool's plus the listener and one heartbeat connection")
}
