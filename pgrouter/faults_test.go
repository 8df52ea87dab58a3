package pgrouter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
			specs := make([]leaserouter.JobSpec[int], n)
			for i := range specs {
				specs[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i), Payload: i}
			}
			_, err := r.EnqueueMany(ctx, specs)
			require.NoError(t, err)

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
				err := db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE state <> 3").Scan(&left)
				return err == nil && left == 0
			})
			cancel()
			require.NoError(t, <-done)
			var succeeded int
			require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE state = 3").Scan(&succeeded))
			require.Equal(t, n, succeeded, "none lost")
			require.Greater(t, ran.Load(), int64(n/3), "jobs ran after the restart")
		})
	}
}
