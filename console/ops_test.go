package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
)

// TestRunNowMakesScheduledJobPending: "run now" on a scheduled job's
// page makes it pending at once, its attempt count kept; on a job not
// scheduled it is refused (409, nothing changed); the button shows on a
// scheduled job's page only.
func TestRunNowMakesScheduledJobPending(t *testing.T) {
	r, h := setup(t, console.Options{})
	require.NoError(t, r.Enqueue("later", item{Path: "/src/later"}, leaserouter.WithDelay(time.Hour)))
	enqueue(t, r, "now")
	require.Contains(t, testIDs(requireOK(t, get(t, h, "/job?queue=files&id=later")), "run-now-button", "value"), "run-now")
	require.Empty(t, testIDs(requireOK(t, get(t, h, "/job?queue=files&id=now")), "run-now-button", "value"))

	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"run-now"}, "queue": {"files"}, "id": {"later"}}))
	require.Contains(t, body, `data-testid="result-done">1<`)
	require.Equal(t, leaserouter.StatePending, state(t, r, "later"))

	before := r.Stats()
	requireStatus(t, post(t, h, "/action", url.Values{"action": {"run-now"}, "queue": {"files"}, "id": {"now"}}),
		http.StatusConflict, "job not scheduled")
	require.Equal(t, before, r.Stats())
	requireStatus(t, post(t, h, "/action", url.Values{"action": {"run-now"}, "queue": {"files"}}), http.StatusBadRequest, "the id field is missing")
}

// TestBulkButtonsOnlyWhereTheyApply: a list page offers the bulk actions
// that can apply to a job in its states (no Cancel on the dead page, no
// Retry on the pending one), and the server still refuses, job by job,
// an action posted where it does not apply.
func TestBulkButtonsOnlyWhereTheyApply(t *testing.T) {
	r, h := setup(t, console.Options{})
	kill(t, r, "dead")
	buttons := func(target string) []string {
		var out []string
		body := requireOK(t, get(t, h, target))
		for _, id := range []string{"retry-button", "cancel-button", "delete-button"} {
			out = append(out, testIDs(body, id, "value")...)
		}
		return out
	}
	require.Equal(t, []string{"retry", "delete"}, buttons("/dead?queue=files"))
	require.Equal(t, []string{"cancel", "delete"}, buttons("/jobs?queue=files&state=pending"))
	require.Equal(t, []string{"cancel"}, buttons("/jobs?queue=files&state=leased"))
	require.Equal(t, []string{"retry", "delete"}, buttons("/jobs?queue=files&state=succeeded&state=canceled"))
	require.Equal(t, []string{"retry", "cancel", "delete"}, buttons("/jobs?queue=files"))

	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"cancel"}, "queue": {"files"}, "id.dead": {"dead"}}))
	require.Contains(t, body, `data-testid="result-done">0<`)
	require.Equal(t, leaserouter.StateDead, state(t, r, "dead"), "Cancel of a dead job still refused")
}

// TestBrowserRunNowAndBulkButtons: in Chromium, a scheduled job's page
// runs it now (pending, as the Router says), and the dead page offers
// Retry and Delete but no Cancel.
func TestBrowserRunNowAndBulkButtons(t *testing.T) {
	r, h := setup(t, console.Options{})
	require.NoError(t, r.Enqueue("nightly-report", item{Path: "/reports"}, leaserouter.WithDelay(2*time.Hour)))
	kill(t, r, "img-009.png")
	b := newBrowser(t, h)

	b.do(t, chromedp.Navigate(b.base+"job?queue=files&id=nightly-report"), chromedp.WaitVisible(sel("job-id")))
	require.Contains(t, b.text(t, sel("job-state")), "scheduled")
	b.navigate(t, chromedp.Click(sel("job-actions")+" "+sel("run-now-button")))
	b.do(t, chromedp.WaitVisible(sel("result-message")))
	b.navigate(t, chromedp.Click(sel("back-link")))
	b.do(t, chromedp.WaitVisible(sel("job-state")))
	require.Contains(t, b.text(t, sel("job-state")), "pending")
	require.Zero(t, b.count(t, sel("run-now-button")), "pending: no run now")
	require.Equal(t, leaserouter.StatePending, state(t, r, "nightly-report"))

	b.do(t, chromedp.Navigate(b.base+"dead?queue=files"), chromedp.WaitVisible(sel("bulk-bar")))
	require.Equal(t, 1, b.count(t, sel("bulk-bar")+" "+sel("retry-button")))
	require.Equal(t, 1, b.count(t, sel("bulk-bar")+" "+sel("delete-button")))
	require.Zero(t, b.count(t, sel("bulk-bar")+" "+sel("cancel-button")), "no Cancel on the dead page")
}

// waitingSource is a Source whose ready order's head has been ready
// since a given instant.
type waitingSource struct {
	console.Source
	since time.Time
}

func (s waitingSource) Stats(ctx context.Context) (leaserouter.Stats, error) {
	st, err := s.Source.Stats(ctx)
	st.ReadySince = s.since
	return st, err
}

// TestOverviewShowsQueueLatency: each queue's card says how long the
// next job to lease has waited (Stats.ReadySince), in minutes and hours,
// or that none is pending.
func TestOverviewShowsQueueLatency(t *testing.T) {
	idle := newRouter(t, leaserouter.Options{})
	busy := newRouter(t, leaserouter.Options{})
	enqueue(t, busy, "a")
	since := time.Now().Add(-37*time.Minute - 44*time.Second)
	h, err := console.New(console.Options{}, console.Router("idle", idle), waitingSource{console.Router("busy", busy), since})
	require.NoError(t, err)
	body := requireOK(t, get(t, h, "/"))
	require.Regexp(t, `data-queue="idle">Latency: <span data-testid="latency-value">none pending<`, body)
	require.Regexp(t, `data-testid="latency-value">37m [0-9]+s<`, body) // the clock moves on a busy machine
	require.Contains(t, testIDs(body, "latency-value", "datetime"), since.UTC().Format(time.RFC3339Nano))
}

// TestBrowserOverviewShowsLatency: in Chromium, the overview's card says
// how long the next job to lease has waited, in minutes and seconds.
func TestBrowserOverviewShowsLatency(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	enqueue(t, r, "a")
	h, err := console.New(console.Options{}, waitingSource{console.Router("files", r), time.Now().Add(-2*time.Hour - 5*time.Minute)})
	require.NoError(t, err)
	b := newBrowser(t, h)
	b.do(t, chromedp.Navigate(b.base), chromedp.WaitVisible(sel("queue-latency")))
	require.Equal(t, "2h 5m", b.text(t, sel("latency-value")))
}

// TestLeaseWithoutHeartbeatSaysNever: a lease that has had no heartbeat
// shows "never" as its last heartbeat (on the leases page and the job's
// page), not its grant time; after one, the heartbeat's age.
func TestLeaseWithoutHeartbeatSaysNever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := leaserouter.New[item](leaserouter.Options{LeaseDuration: time.Minute})
		require.NoError(t, err)
		defer closeNow(r)
		h, err := console.New(console.Options{}, console.Router("files", r))
		require.NoError(t, err)
		enqueue(t, r, "a")
		l, err := r.TryAcquire("indexer-3")
		require.NoError(t, err)
		time.Sleep(20 * time.Second)

		leases := requireOK(t, get(t, h, "/leases"))
		require.Regexp(t, `data-testid="lease-heartbeat"><span[^>]*>never</span> <span class="muted">\(granted 20s ago\)`, leases)
		require.Regexp(t, `data-testid="lease-expiry"[^>]*>in 40s<`, leases)
		job := requireOK(t, get(t, h, "/job?queue=files&id=a"))
		require.Regexp(t, `data-testid="lease-heartbeat">never `, job)

		require.NoError(t, l.Heartbeat(nil))
		time.Sleep(5 * time.Second)
		leases = requireOK(t, get(t, h, "/leases"))
		require.Regexp(t, `data-testid="lease-heartbeat"><time [^>]*>5s ago<`, leases)
		require.NotContains(t, requireOK(t, get(t, h, "/job?queue=files&id=a")), ">never")
	})
}

// TestBrowserLeaseWithoutHeartbeatSaysNever: in Chromium, the leases
// page says "never" for a lease with no heartbeat yet.
func TestBrowserLeaseWithoutHeartbeatSaysNever(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "video-2.mp4")
	_, err := r.TryAcquire("transcoder-1")
	require.NoError(t, err)
	b := newBrowser(t, h)
	b.do(t, chromedp.Navigate(b.base+"leases"), chromedp.WaitVisible(sel("leases-table")))
	require.Contains(t, b.text(t, sel("lease-row")+`[data-id="video-2.mp4"] `+sel("lease-heartbeat")), "never")
}

// leaseAll leases every job of r (worker-7), returning the leases.
func leaseAll(t *testing.T, r *leaserouter.Router[item]) []*leaserouter.Lease[item] {
	t.Helper()
	var out []*leaserouter.Lease[item]
	for {
		ls, err := r.TryAcquireMany("worker-7", 1000)
		if errors.Is(err, leaserouter.ErrNoJob) {
			return out
		}
		require.NoError(t, err)
		out = append(out, ls...)
	}
}

// TestLeasesPagesBeyondTheFirst: the leases page pages by a cursor, with
// next, previous and first page links that keep the queue and limit, so
// every lease is reachable (not only the first 1,000); a bad cursor is a
// 400 page, and so is a cursor without a queue when there are several.
func TestLeasesPagesBeyondTheFirst(t *testing.T) {
	r, h := setup(t, console.Options{})
	for i := range 5 {
		enqueue(t, r, fmt.Sprintf("j%d", i))
	}
	leaseAll(t, r)
	target := "/leases?queue=files&limit=2"
	var pages [][]string
	for range 3 {
		body := requireOK(t, get(t, h, target))
		pages = append(pages, testIDs(body, "lease-row", "data-id"))
		next := testIDs(body, "next-page", "href")
		if len(pages) == 3 {
			require.Empty(t, next, "the last page")
			prev := testIDs(body, "prev-page", "href")
			require.Len(t, prev, 1)
			back := requireOK(t, get(t, h, "/"+prev[0]))
			require.Equal(t, pages[1], testIDs(back, "lease-row", "data-id"), "previous page: the one before")
			first := testIDs(body, "first-page", "href")
			require.Equal(t, pages[0], testIDs(requireOK(t, get(t, h, "/"+first[0])), "lease-row", "data-id"))
			break
		}
		require.Len(t, next, 1)
		require.Contains(t, next[0], "limit=2")
		target = "/" + next[0]
	}
	require.Equal(t, [][]string{{"j0", "j1"}, {"j2", "j3"}, {"j4"}}, pages)
	requireStatus(t, get(t, h, "/leases?queue=files&cursor=bogus"), http.StatusBadRequest, "LeasesParams.Cursor is malformed")
	two, err := console.New(console.Options{}, console.Router("files", r), console.Router("other", newRouter(t, leaserouter.Options{})))
	require.NoError(t, err)
	requireStatus(t, get(t, two, "/leases?cursor=bogus"), http.StatusBadRequest, "the queue parameter is missing")
}

// TestBrowserPagesThroughLeasesBeyondAThousand: in Chromium, the leases
// page's next-page links reach all of 1,500 leases (it stopped at 1,000),
// each once, and "previous page" goes back.
func TestBrowserPagesThroughLeasesBeyondAThousand(t *testing.T) {
	r, h := setup(t, console.Options{})
	for i := range 1500 {
		require.NoError(t, r.Enqueue(fmt.Sprintf("job-%04d", i), item{Path: "/src"}))
	}
	leaseAll(t, r)
	b := newBrowser(t, h)
	b.do(t, chromedp.Navigate(b.base+"leases?queue=files&limit=1000"), chromedp.WaitVisible(sel("leases-table")))
	rowIDs := func() []string {
		ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid="lease-row"]')].map(e => e.dataset.id)`))
		require.NoError(t, err)
		return ids
	}
	first := rowIDs()
	require.Len(t, first, 1000)
	b.navigate(t, chromedp.Click(sel("next-page")))
	b.do(t, chromedp.WaitVisible(sel("leases-table")))
	second := rowIDs()
	require.Len(t, second, 500)
	require.Zero(t, b.count(t, sel("next-page")), "the last page")
	seen := map[string]bool{}
	for _, id := range append(slices.Clone(first), second...) {
		require.False(t, seen[id], "%s listed twice", id)
		seen[id] = true
	}
	require.Len(t, seen, 1500)
	b.navigate(t, chromedp.Click(sel("prev-page")))
	b.do(t, chromedp.WaitVisible(sel("leases-table")))
	require.Equal(t, first, rowIDs())
}

// TestJobsPagePreviousLink: a jobs page after the first links back to
// the page before it (and the first), keeping the filter and limit.
func TestJobsPagePreviousLink(t *testing.T) {
	r, h := setup(t, console.Options{})
	for i := range 5 {
		enqueue(t, r, fmt.Sprintf("j%d", i))
	}
	ids := func(target string) ([]string, string) {
		body := requireOK(t, get(t, h, target))
		next := testIDs(body, "next-page", "href")
		prev := testIDs(body, "prev-page", "href")
		if target == "/jobs?queue=files&state=pending&limit=2" {
			require.Empty(t, prev, "no page before the first")
		}
		if len(next) == 0 {
			require.Len(t, prev, 1)
			return testIDs(body, "job-row", "data-id"), "/" + prev[0]
		}
		return testIDs(body, "job-row", "data-id"), "/" + next[0]
	}
	first, next := ids("/jobs?queue=files&state=pending&limit=2")
	second, next := ids(next)
	third, prev := ids(next)
	require.Equal(t, [][]string{{"j4", "j3"}, {"j2", "j1"}, {"j0"}}, [][]string{first, second, third})
	back, _ := ids(prev)
	require.Equal(t, second, back, "previous page: the one before")
	require.Contains(t, prev, "state=pending")
	require.Contains(t, prev, "limit=2")
}
