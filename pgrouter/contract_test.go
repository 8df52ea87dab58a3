package pgrouter_test

// pgrouter's own parts of rules it shares with the core through
// internal/contract (the shared parts are rows of the conformance suite,
// internal/routertest, run against both backends): the message for an
// option only pgrouter has, and the Time of the completed event after
// CompleteTx, an API only pgrouter has.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestInvalidPollIntervalMessage: a negative PollInterval is refused in
// the form of the core's messages, wrapping ErrInvalidOptions.
func TestInvalidPollIntervalMessage(t *testing.T) {
	db := pgtest.New(t)
	_, err := pgrouter.New[int](t.Context(), db, pgrouter.Options{PollInterval: -time.Second})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.EqualError(t, err, "leaserouter: invalid options: PollInterval is -1s, must be >= 0 (or 0 for the default 1s)")
}

// TestCompletedEventTimeAfterCompleteTx: the completed event Run emits
// for a lease its handler completed with CompleteTx has the database's
// instant of the completion as its Time (the row's updated_at), not the
// moment Run saw the commit.
func TestCompletedEventTimeAfterCompleteTx(t *testing.T) {
	var mu sync.Mutex
	var completed *leaserouter.Event
	r, db := newRouter[int](t, pgrouter.Options{OnEvent: func(e leaserouter.Event) {
		if e.Kind == leaserouter.EventCompleted {
			mu.Lock()
			completed = &e
			mu.Unlock()
		}
	}})
	require.NoError(t, r.Enqueue(t.Context(), "completed", 0))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	txErr := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(ctx context.Context, l *pgrouter.Lease[int]) error {
			tx, err := db.Begin(ctx)
			if err == nil {
				err = l.CompleteTx(ctx, tx)
				if err == nil {
					err = tx.Commit(ctx)
				} else {
					_ = tx.Rollback(ctx)
				}
			}
			txErr <- err
			time.Sleep(200 * time.Millisecond) // Run sees the commit after this
			return nil
		})
	}()
	require.NoError(t, <-txErr)
	var e leaserouter.Event
	eventually(t, 10*time.Second, "the completed event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if completed != nil {
			e = *completed
		}
		return completed != nil
	})
	cancel()
	require.NoError(t, <-done)
	j, _, err := r.Get(t.Context(), "completed")
	require.NoError(t, err)
	require.True(t, e.Time.Equal(j.UpdatedAt), "completed at %v, the row says %v", e.Time, j.UpdatedAt)
}
