package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
)

// slowExact is an estimated source whose ExactStats (seconds at
// millions of jobs on pgrouter: a read of every job) blocks until
// release is closed or its ctx ends, recording how many run at once and
// in all.
type slowExact struct {
	estimatedSource
	release                 chan struct{}
	running, highest, calls *atomic.Int64
}

func newSlowExact(r *leaserouter.Router[item]) slowExact {
	return slowExact{estimatedSource{console.Router("big", r), time.Now()}, make(chan struct{}), new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)}
}

func (s slowExact) ExactStats(ctx context.Context) (leaserouter.Stats, error) {
	s.calls.Add(1)
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
		return leaserouter.Stats{}, ctx.Err()
	}
	return s.Source.Stats(ctx)
}

// TestExactCountsOfAQueueRunOneAtATime: eight requests of "/?exact=big"
// (eight tabs, a reload loop, a script) at once are one exact count of
// the queue, whose result all eight show, not eight reads of every job
// in parallel.
func TestExactCountsOfAQueueRunOneAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, leaserouter.Options{})
		enqueue(t, r, "a")
		src := newSlowExact(r)
		h, err := console.New(console.Options{ReadOnly: true}, src)
		require.NoError(t, err)
		var wg sync.WaitGroup
		pages := make([]*httptest.ResponseRecorder, 8)
		for i := range pages {
			wg.Go(func() { pages[i] = get(t, h, "/?exact=big") })
		}
		synctest.Wait() // every request counts or waits for the count
		require.EqualValues(t, 1, src.running.Load())
		close(src.release)
		wg.Wait()
		require.EqualValues(t, 1, src.highest.Load(), "exact counts of one queue running at once")
		require.EqualValues(t, 1, src.calls.Load())
		for _, w := range pages {
			require.Contains(t, requireOK(t, w), `data-testid="counted-exactly"`)
		}
	})
}

// TestExactCountGoesOnWhenItsRequestEnds: the request counting ends
// (its client gone) while another waits for its count: the waiting one
// counts again rather than fail with the other's end.
func TestExactCountGoesOnWhenItsRequestEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRouter(t, leaserouter.Options{})
		enqueue(t, r, "a")
		src := newSlowExact(r)
		h, err := console.New(console.Options{}, src)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodGet, "/?exact=big", nil))
		})
		synctest.Wait() // the first counts
		var waiter *httptest.ResponseRecorder
		wg.Go(func() { waiter = get(t, h, "/?exact=big") })
		synctest.Wait() // the second waits for its count
		cancel()
		synctest.Wait() // the second counts
		require.EqualValues(t, 2, src.calls.Load())
		close(src.release)
		wg.Wait()
		require.Contains(t, requireOK(t, waiter), `data-testid="counted-exactly"`)
	})
}

// TestCountExactlyIsAuthorizedApart: "?exact=" is authorized as
// CountExactly after ViewOverview, so that Authorize can keep exact
// counts from those allowed only to view; refused, it counts nothing
// (403), and the overview without it is still shown. ReadOnly does not
// refuse it (it changes nothing).
func TestCountExactlyIsAuthorizedApart(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	enqueue(t, r, "a")
	var calls atomic.Int64
	var mu sync.Mutex
	var asked []console.Action
	h, err := console.New(console.Options{ReadOnly: true, Authorize: func(r *http.Request, a console.Action) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, a)
		if a == console.CountExactly {
			return errors.New("viewers may not count")
		}
		return nil
	}}, exactCounter{estimatedSource{console.Router("big", r), time.Now()}, &calls})
	require.NoError(t, err)
	w := get(t, h, "/?exact=big")
	require.Equal(t, http.StatusForbidden, w.Code)
	require.Contains(t, w.Body.String(), "viewers may not count")
	require.Zero(t, calls.Load())
	require.Equal(t, []console.Action{console.ViewOverview, console.CountExactly}, asked)
	require.Contains(t, requireOK(t, get(t, h, "/")), `data-testid="count-exactly"`)
	require.False(t, console.CountExactly.Mutates())
}

// barrierSource is a Source whose Stats returns only once all n of a
// barrier's sources are in their Stats.
type barrierSource struct {
	console.Source
	in  *atomic.Int64
	all chan struct{}
	n   int64
}

func (s barrierSource) Stats(ctx context.Context) (leaserouter.Stats, error) {
	if s.in.Add(1) == s.n {
		close(s.all)
	}
	select {
	case <-s.all:
	case <-ctx.Done():
		return leaserouter.Stats{}, ctx.Err()
	}
	return s.Source.Stats(ctx)
}

// TestOverviewReadsQueuesConcurrently: the overview asks its queues for
// their Stats at once (a round trip each to a database, tens of
// milliseconds for a large queue), not one after another.
func TestOverviewReadsQueuesConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var in atomic.Int64
		all := make(chan struct{})
		var sources []console.Source
		for _, q := range []string{"a", "b", "c"} {
			sources = append(sources, barrierSource{console.Router(q, newRouter(t, leaserouter.Options{})), &in, all, 3})
		}
		h, err := console.New(console.Options{}, sources...)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // synctest's time: a sequential read ends here
		defer cancel()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
		body := requireOK(t, w)
		require.NotContains(t, body, "deadline exceeded")
	})
}
