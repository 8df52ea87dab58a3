package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/stretchr/testify/require"
)

// slowExact is an estimated source whose ExactStats (seconds at
// millions of jobs on pgrouter: a read of every job) blocks until
// release is closed, recording how many run at once.
type slowExact struct {
	estimatedSource
	release          chan struct{}
	running, highest *atomic.Int64
}

func (s slowExact) ExactStats(ctx context.Context) (leaserouter.Stats, error) {
	n := s.running.Add(1)
	defer s.running.Add(-1)
	for {
		h := s.highest.Load()
		if n <= h || s.highest.CompareAndSwap(h, n) {
			break
		}
	}
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return s.Source.Stats(ctx)
}

// TestExactCountsDoNotPileUp: "?exact=" makes any viewer of the overview
// (ViewOverview, read-only included: the only Action Authorize sees) run
// a full count of the queue, and nothing bounds how many run at once:
// eight GETs of "/?exact=big" (eight tabs, a reload loop, a script) are
// eight full scans of the jobs table in parallel. Expected: at most one
// exact count of a queue at a time (the others wait for it and share its
// result, or are refused), or a distinct Action so that Authorize can
// keep it from viewers.
func TestExactCountsDoNotPileUp(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	enqueue(t, r, "a")
	var running, highest atomic.Int64
	src := slowExact{estimatedSource{console.Router("big", r), time.Now()}, make(chan struct{}), &running, &highest}
	var actions sync.Map
	h, err := console.New(console.Options{ReadOnly: true, Authorize: func(r *http.Request, a console.Action) error {
		actions.Store(a, true)
		return nil
	}}, src)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/?exact=big", nil))
		}()
	}
	require.Eventually(t, func() bool { return running.Load() >= 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(200 * time.Millisecond) // let the others arrive
	close(src.release)
	wg.Wait()
	_, authorized := actions.Load(console.ViewOverview)
	require.True(t, authorized, "Authorize is asked (as ViewOverview)")
	require.LessOrEqual(t, highest.Load(), int64(1), "exact counts of one queue running at once")
}
