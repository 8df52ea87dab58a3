package pgrouter_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// A Router of raw JSON payloads is a console.Source as it is.
var _ console.Source = (*pgrouter.Router[json.RawMessage])(nil)

// TestLeasesExpiringSoonestFirst: Leases lists the queue's leased jobs
// by lease expiry, soonest first, at most limit, with holder and token,
// and refuses a bad limit without a round trip.
func TestLeasesExpiringSoonestFirst(t *testing.T) {
	r, _ := newRouter[int](t, pgrouter.Options{LeaseDuration: time.Minute})
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c", "d"} {
		require.NoError(t, r.Enqueue(ctx, id, 1))
	}
	var ls []*pgrouter.Lease[int]
	for range 3 {
		l, err := r.TryAcquire(ctx, "w")
		require.NoError(t, err)
		ls = append(ls, l)
	}
	require.NoError(t, ls[0].Heartbeat(ctx, nil)) // a: now the latest expiry
	got, err := r.Leases(ctx, 0)
	require.NoError(t, err)
	var ids []string
	for _, j := range got {
		ids = append(ids, j.ID)
		require.Equal(t, leaserouter.StateLeased, j.State)
		require.Equal(t, "w", j.Owner)
	}
	require.Equal(t, []string{ls[1].JobID, ls[2].JobID, ls[0].JobID}, ids)
	require.Equal(t, ls[1].Token, got[0].Token)
	got, err = r.Leases(ctx, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	for _, bad := range []int{-1, leaserouter.MaxListLimit + 1} {
		_, err = r.Leases(ctx, bad)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	}
}

// TestHistoryCountsEveryProcess: History sums what every process on the
// queue counted in the current minute of the database's clock:
// completions, failed attempts, deaths, stale refusals, whether or not a
// hook is set.
func TestHistoryCountsEveryProcess(t *testing.T) {
	r, db := newRouter[int](t, pgrouter.Options{MaxAttempts: 1})
	other := routerOn[int](t, db, pgrouter.Options{MaxAttempts: 1, OnEvent: func(leaserouter.Event) {}})
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c", "d"} {
		require.NoError(t, r.Enqueue(ctx, id, 1))
	}
	run := func(rt *pgrouter.Router[int], n int) { // Run completes n jobs
		ctx, cancel := context.WithCancel(ctx)
		done := 0
		require.NoError(t, rt.Run(ctx, leaserouter.WorkerOptions{Workers: 1, Batch: 1}, func(context.Context, *pgrouter.Lease[int]) error {
			if done++; done == n {
				cancel()
			}
			return nil
		}))
	}
	run(r, 1)     // no hook: counted all the same
	run(other, 1) // another process, with a hook
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(ctx, nil)) // one attempt: failed, then dead
	stale, err := other.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, r.Cancel(ctx, stale.JobID))
	require.ErrorIs(t, stale.Complete(ctx), leaserouter.ErrLeaseLost)
	eventually(t, 10*time.Second, "every process's counts in the table", func() bool {
		h, err := r.History(ctx)
		require.NoError(t, err)
		require.Len(t, h, leaserouter.HistoryMinutes)
		var sum leaserouter.Minute
		for _, m := range h {
			sum.Completed += m.Completed
			sum.Failed += m.Failed
			sum.Dead += m.Dead
			sum.StaleRejected += m.StaleRejected
		}
		return sum == leaserouter.Minute{Completed: 2, Failed: 1, Dead: 1, StaleRejected: 1}
	})
	h, err := other.History(ctx)
	require.NoError(t, err)
	last := h[len(h)-1].Start
	require.WithinDuration(t, time.Now(), last, 2*time.Minute, "the last minute is the database's current one")
	require.Equal(t, time.Minute, last.Sub(h[len(h)-2].Start))
}

// TestConsoleOverPostgres: the console serves a pgrouter queue: the
// overview, the jobs page, a job's page, and a retry from it.
func TestConsoleOverPostgres(t *testing.T) {
	r, _ := newRouter[json.RawMessage](t, pgrouter.Options{MaxAttempts: 1})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "img-1.png", json.RawMessage(`{"path":"/img/1"}`)))
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(ctx, leaserouter.Permanent(io.ErrUnexpectedEOF)))
	h, err := console.New(console.Options{}, r)
	require.NoError(t, err)
	srv := httptest.NewServer(http.StripPrefix("/ops", h))
	t.Cleanup(srv.Close)
	get := func(path string) string {
		res, err := http.Get(srv.URL + "/ops/" + path)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", path, b)
		return string(b)
	}
	require.Contains(t, get(""), pgrouter.DefaultQueue)
	require.Contains(t, get("dead"), "img-1.png")
	page := get("jobs?state=failed")
	require.Contains(t, page, "img-1.png")
	require.Contains(t, get("job?queue="+pgrouter.DefaultQueue+"&id=img-1.png"), "/img/1")
	form := strings.NewReader("queue=" + pgrouter.DefaultQueue + "&id=img-1.png&action=retry")
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/ops/action", form)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	j, ok, err := r.Get(ctx, "img-1.png")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, leaserouter.StatePending, j.State, "retried from the console")
}
