package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/stretchr/testify/require"
)

func TestNewRefusesBadSources(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	for name, sources := range map[string][]console.Source{
		"none":       nil,
		"nil":        {console.Router("a", r), nil},
		"empty name": {console.Router("", r)},
		"same name":  {console.Router("a", r), console.Router("b", r), console.Router("a", r)},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := console.New(console.Options{}, sources...)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			require.Nil(t, h)
		})
	}
}

func TestOverviewShowsCountsTroubleAndChart(t *testing.T) {
	r, h := setup(t, console.Options{Title: "Acme jobs"})
	enqueue(t, r, "p1", "p2", "p3")
	for i := range 1234 {
		enqueue(t, r, fmt.Sprintf("bulk-%d", i))
	}
	kill(t, r, "dead-1")
	l := leaseID(t, r, "p1")
	require.NoError(t, l.Complete())

	body := requireOK(t, get(t, h, "/"))
	require.Contains(t, body, "Acme jobs")
	require.Contains(t, body, `data-queue="files"`)
	counts := testIDs(body, "state-count", "data-state")
	require.Equal(t, []string{"pending", "scheduled", "leased", "succeeded", "dead", "canceled"}, counts)
	require.Regexp(t, `data-testid="state-count" data-state="pending">1,236<`, body, "thousands separators")
	require.Regexp(t, `data-testid="state-count" data-state="dead">1<`, body)
	require.Contains(t, testIDs(body, "state-link", "href"), "jobs?queue=files&state=dead")
	require.Contains(t, body, `class="card trouble"`, "a dead job is trouble")
	require.Contains(t, body, "<svg", "the chart")
	require.Contains(t, body, `class="bar-completed"`, "a completion in the last hour is drawn")
	require.Contains(t, body, `class="bar-failed"`)
	require.Contains(t, body, "1 completed")
	require.NotContains(t, body, `data-testid="paused-badge"`)
	require.Contains(t, body, `data-testid="pause-button"`)
}

func TestHeadOfPageHasNoBody(t *testing.T) {
	_, h := setup(t, console.Options{})
	w := serve(h, httptestRequest(http.MethodHead, "/jobs"))
	require.Equal(t, http.StatusOK, w.Code)
	require.Empty(t, w.Body.String())
	require.Contains(t, w.Header().Get("Content-Type"), "text/html")
}

func TestPagesSayNoindex(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "a")
	for _, target := range []string{"/", "/jobs", "/job?queue=files&id=a", "/leases", "/dead", "/nowhere", "/healthz"} {
		w := get(t, h, target)
		require.Contains(t, w.Header().Get("X-Robots-Tag"), "noindex", target)
		if w.Header().Get("Content-Type") == "text/html; charset=utf-8" {
			require.Contains(t, w.Body.String(), `<meta name="robots" content="noindex, nofollow">`, target)
		}
	}
}

// TestMountedUnderAnyPrefix follows every link of every page, served at
// the root and under /ops/jobs/ behind http.StripPrefix: each resolves,
// relative to the page, to a page of the console that answers 200.
func TestMountedUnderAnyPrefix(t *testing.T) {
	for _, prefix := range []string{"/", "/ops/jobs/"} {
		t.Run(prefix, func(t *testing.T) {
			r, h := setup(t, console.Options{})
			enqueue(t, r, "a/b c", "d")
			kill(t, r, "dead?x=1&y")
			leaseID(t, r, "d")
			mux := http.NewServeMux()
			mux.Handle(prefix, http.StripPrefix(strings.TrimSuffix(prefix, "/"), h))
			base, _ := url.Parse("http://console.test" + prefix)
			seen := map[string]bool{}
			queue := []string{base.String()}
			for len(queue) > 0 {
				page := queue[0]
				queue = queue[1:]
				if seen[page] {
					continue
				}
				seen[page] = true
				w := get(t, mux, page)
				require.Equal(t, http.StatusOK, w.Code, "%s: %s", page, w.Body)
				if !strings.Contains(w.Header().Get("Content-Type"), "text/html") {
					continue
				}
				pu, _ := url.Parse(page)
				for _, l := range links(w.Body.String()) {
					require.False(t, strings.HasPrefix(l, "/"), "%s links to absolute %q", page, l)
					require.NotContains(t, l, "//", "%s links elsewhere: %q", page, l)
					if l == "action" {
						continue // the forms' target, POST only
					}
					u := pu.ResolveReference(must(url.Parse(l)))
					require.True(t, strings.HasPrefix(u.Path, prefix), "%s: %q resolves to %s", page, l, u)
					queue = append(queue, u.String())
				}
			}
			for _, want := range []string{"", "jobs", "leases", "dead", "static/console.css", "static/console.js"} {
				found := false
				for p := range seen {
					u := must(url.Parse(p))
					found = found || strings.TrimPrefix(u.Path, prefix) == want
				}
				require.True(t, found, "no link to %q", want)
			}
			require.True(t, seen["http://console.test"+prefix+"job?id=dead%3Fx%3D1%26y&queue=files"], "the dead job's page, its ID escaped")

			w := post(t, mux, prefix+"action", url.Values{"action": {"retry"}, "queue": {"files"}, "id": {"dead?x=1&y"}})
			requireOK(t, w)
			require.Equal(t, leaserouter.StatePending, state(t, r, "dead?x=1&y"))
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestJobsFilterByStatePrefixAndQueue(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	other := newRouter(t, leaserouter.Options{})
	h, err := console.New(console.Options{}, console.Router("files", r), console.Router("mail", other))
	require.NoError(t, err)
	enqueue(t, r, "img-1", "img-2", "doc-1")
	kill(t, r, "img-3")
	enqueue(t, other, "mail-1")

	ids := func(target string) []string { return testIDs(requireOK(t, get(t, h, target)), "job-row", "data-id") }
	require.Equal(t, []string{"img-3", "doc-1", "img-2", "img-1"}, ids("/jobs"), "the first queue, newest first")
	require.Equal(t, []string{"img-2", "img-1"}, ids("/jobs?queue=files&state=pending&prefix=img-"))
	require.Equal(t, []string{"img-3", "img-2", "img-1"}, ids("/jobs?prefix=img-"))
	require.Equal(t, []string{"img-3", "doc-1"}, ids("/jobs?state=dead&state=pending&prefix=&limit=2")[:2])
	require.Equal(t, []string{"img-3"}, ids("/jobs?state=dead"))
	require.Equal(t, []string{"mail-1"}, ids("/jobs?queue=mail"))
	require.Empty(t, ids("/jobs?queue=mail&state=leased"))
	require.Contains(t, requireOK(t, get(t, h, "/jobs?queue=mail&state=leased")), `data-testid="no-jobs"`)

	body := requireOK(t, get(t, h, "/jobs?queue=files&state=pending"))
	require.Contains(t, body, `<option value="pending" selected>`)
	require.Contains(t, body, `<option value="files" selected>`)
	require.Contains(t, body, `data-testid="filter-form"`)
	require.Contains(t, testIDs(body, "state-filter", "href"), "jobs?queue=files&state=dead")
}

// TestJobsShowsDeadAndReadsStateFailedAsDead: the dead state is "dead"
// in the filter, the rows and the links; state=failed, its former name (a
// bookmark, a link from an older console), still selects the dead jobs,
// and the page shows and links that filter as dead.
func TestJobsShowsDeadAndReadsStateFailedAsDead(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "img-1")
	kill(t, r, "img-2")
	for _, target := range []string{"/jobs?state=dead", "/jobs?state=failed"} {
		body := requireOK(t, get(t, h, target))
		require.Equal(t, []string{"img-2"}, testIDs(body, "job-row", "data-id"), target)
		require.Equal(t, []string{"dead"}, testIDs(body, "job-row", "data-state"), target)
		require.Contains(t, body, `<option value="dead" selected>dead</option>`, target)
		require.Equal(t, []string{"id.dead"}, testIDs(body, "job-select", "name"), target)
		require.NotContains(t, body, "failed", target)
	}
}

// TestJobsPagingFollowsNextCursor pages through 25 jobs 10 at a time by
// the next-page links: every job once, newest first, then no link.
func TestJobsPagingFollowsNextCursor(t *testing.T) {
	r, h := setup(t, console.Options{})
	var want []string
	for i := range 25 {
		id := fmt.Sprintf("job-%02d", i)
		enqueue(t, r, id)
		want = append([]string{id}, want...)
	}
	var got []string
	target, pages := "/jobs?queue=files&limit=10", 0
	for target != "" {
		body := requireOK(t, get(t, h, target))
		got = append(got, testIDs(body, "job-row", "data-id")...)
		next := testIDs(body, "next-page", "href")
		if pages > 0 {
			require.Len(t, testIDs(body, "first-page", "href"), 1)
		}
		target = ""
		if len(next) == 1 {
			target = "/" + next[0]
			require.Contains(t, next[0], "limit=10")
			require.Contains(t, next[0], "cursor=")
		}
		pages++
		if pages == 2 {
			enqueue(t, r, "late") // newer than the cursor: not on later pages
		}
	}
	require.Equal(t, 3, pages)
	require.Equal(t, want, got)
}

func TestDeadPageShowsFailedJobsWithErrors(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "ok-1")
	kill(t, r, "bad-1")
	kill(t, r, "bad-2")
	body := requireOK(t, get(t, h, "/dead?state=pending"))
	require.Equal(t, []string{"bad-2", "bad-1"}, testIDs(body, "job-row", "data-id"), "the state filter is the page's own")
	require.Contains(t, body, "disk on fire: bad-1")
	require.Contains(t, body, `aria-current="page" data-testid="nav-dead"`)
}

func TestJobPageShowsLeaseAndPayload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := leaserouter.New[item](leaserouter.Options{LeaseDuration: 30 * time.Second, MaxAttempts: 4})
		require.NoError(t, err)
		defer r.Close(context.Background())
		h, err := console.New(console.Options{}, console.Router("files", r))
		require.NoError(t, err)
		require.NoError(t, r.Enqueue("a", item{Path: "/src/a.go"}, leaserouter.WithPriority(7)))
		l, err := r.TryAcquire("indexer-3")
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		require.NoError(t, l.Heartbeat([]byte("line 420")))
		time.Sleep(12 * time.Second)

		body := requireOK(t, get(t, h, "/job?queue=files&id=a"))
		require.Contains(t, body, `<span class="state state-leased" data-state="leased">leased</span>`)
		require.Regexp(t, `data-testid="lease-holder">indexer-3<`, body)
		require.Regexp(t, `data-testid="lease-token">[1-9][0-9,]*<`, body)
		require.Regexp(t, `data-testid="lease-expiry">in 18s<`, body, "30s from the heartbeat, 12s ago")
		require.Contains(t, body, "(12s ago)", "the last heartbeat")
		require.Contains(t, body, "1 of 4")
		require.Contains(t, body, "line 420")
		require.Contains(t, body, `&#34;path&#34;: &#34;/src/a.go&#34;`, "the payload, indented JSON")
		require.Contains(t, body, `data-testid="cancel-button"`)
		require.NotContains(t, body, `data-testid="delete-button"`, "a leased job cannot be deleted")
		require.NotContains(t, body, `data-testid="retry-button"`)

		time.Sleep(20 * time.Second)
		body = requireOK(t, get(t, h, "/job?queue=files&id=a"))
		require.Contains(t, body, "state-pending", "the lease expired: settled before it is shown")
		require.NotContains(t, body, `data-testid="lease"`)
		require.Contains(t, body, `data-testid="delete-button"`)
	})
}

func TestLeasesPageExpiringSoonestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := leaserouter.New[item](leaserouter.Options{LeaseDuration: 30 * time.Second})
		require.NoError(t, err)
		defer r.Close(context.Background())
		h, err := console.New(console.Options{}, console.Router("files", r))
		require.NoError(t, err)
		for _, id := range []string{"a", "b", "c"} {
			require.NoError(t, r.Enqueue(id, item{}))
		}
		la, err := r.TryAcquire("w-a")
		require.NoError(t, err)
		time.Sleep(5 * time.Second)
		lb, err := r.TryAcquire("w-b")
		require.NoError(t, err)
		time.Sleep(5 * time.Second)
		require.NoError(t, la.Heartbeat(nil)) // a now expires last

		body := requireOK(t, get(t, h, "/leases"))
		require.Equal(t, []string{lb.JobID, la.JobID}, testIDs(body, "lease-row", "data-id"))
		require.Regexp(t, `data-testid="lease-expiry"[^>]*>in 25s<`, body)
		require.Regexp(t, `data-testid="lease-expiry"[^>]*>in 30s<`, body)
		require.Contains(t, body, "w-b")

		body = requireOK(t, get(t, h, "/leases?limit=1"))
		require.Equal(t, []string{lb.JobID}, testIDs(body, "lease-row", "data-id"))
	})
}

func TestRedactAppliesToPayload(t *testing.T) {
	var asked []string
	r, h := setup(t, console.Options{Redact: func(queue, id string, p json.RawMessage) json.RawMessage {
		asked = append(asked, queue+"/"+id)
		var it item
		require.NoError(t, json.Unmarshal(p, &it))
		it.Secret = "[redacted]"
		return must(json.Marshal(it))
	}})
	require.NoError(t, r.Enqueue("a", item{Path: "/a", Secret: "hunter2"}))
	body := requireOK(t, get(t, h, "/job?queue=files&id=a"))
	require.NotContains(t, body, "hunter2")
	require.Contains(t, body, "[redacted]")
	require.Equal(t, []string{"files/a"}, asked)
	for _, target := range []string{"/", "/jobs", "/leases", "/dead"} {
		require.NotContains(t, requireOK(t, get(t, h, target)), "hunter2", target)
	}
}

func TestUnmarshalablePayloadIsShownNotFailed(t *testing.T) {
	r, err := leaserouter.New[any](leaserouter.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	h, err := console.New(console.Options{}, console.Router("odd", r))
	require.NoError(t, err)
	require.NoError(t, r.Enqueue("chan", make(chan int)))
	require.NoError(t, r.Enqueue("panics", panicky{}))
	body := requireOK(t, get(t, h, "/job?queue=odd&id=chan"))
	require.Contains(t, body, "the payload cannot be shown as JSON")
	body = requireOK(t, get(t, h, "/job?queue=odd&id=panics"))
	require.Contains(t, body, "the payload cannot be shown as JSON: panic: no JSON today")
	requireOK(t, get(t, h, "/jobs?queue=odd"))
}

// panicky is a payload whose MarshalJSON panics.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("no JSON today") }

// failing is a Source whose reads fail.
type failing struct{ console.Source }

var errDown = errors.New("database is down")

func (failing) Stats(context.Context) (leaserouter.Stats, error) { return leaserouter.Stats{}, errDown }
func (failing) ListJSON(context.Context, leaserouter.ListParams) (leaserouter.JobPage[json.RawMessage], error) {
	return leaserouter.JobPage[json.RawMessage]{}, errDown
}

func TestHealthz(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	h, err := console.New(console.Options{}, console.Router("files", r))
	require.NoError(t, err)
	w := get(t, h, "/healthz")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "ok\n", w.Body.String())

	h, err = console.New(console.Options{}, console.Router("files", r), failing{console.Router("db", r)})
	require.NoError(t, err)
	w = get(t, h, "/healthz")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Contains(t, w.Body.String(), `queue "db": database is down`)

	// A failing source is shown on the overview, not a failed page.
	body := requireOK(t, get(t, h, "/"))
	require.Contains(t, body, "database is down")
	w = get(t, h, "/jobs?queue=db")
	requireStatus(t, w, http.StatusInternalServerError, "database is down")
}

func TestStaticAssetsAreEmbeddedAndLocal(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "a")
	for _, a := range []struct{ path, ctype string }{{"/static/console.css", "text/css"}, {"/static/console.js", "javascript"}} {
		w := get(t, h, a.path)
		require.Equal(t, http.StatusOK, w.Code)
		require.Contains(t, w.Header().Get("Content-Type"), a.ctype)
		require.NotContains(t, w.Body.String(), "http://")
		require.NotContains(t, w.Body.String(), "https://")
	}
	requireStatus(t, get(t, h, "/static/nope.js"), http.StatusNotFound, "no asset")
	for _, target := range []string{"/", "/jobs", "/job?queue=files&id=a", "/leases", "/dead"} {
		body := requireOK(t, get(t, h, target))
		require.NotRegexp(t, `(src|href)="(https?:)?//`, body, target)
		require.Contains(t, body, `id="refresh"`, target)
	}
}

// timeoutSource is a Source whose jobs have an attempt limit of 90s
// (WithTimeout), as Get reports it.
type timeoutSource struct{ console.Source }

func (s timeoutSource) GetJSON(ctx context.Context, id string) (leaserouter.Job[json.RawMessage], bool, error) {
	j, ok, err := s.Source.GetJSON(ctx, id)
	j.Timeout = 90 * time.Second
	return j, ok, err
}

// TestJobPageShowsTimeout: the job page shows the job's attempt limit
// (Job.Timeout), or that the worker's applies when it has none.
func TestJobPageShowsTimeout(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	enqueue(t, r, "a")
	h, err := console.New(console.Options{}, console.Router("plain", r), timeoutSource{console.Router("timed", r)})
	require.NoError(t, err)
	require.Contains(t, requireOK(t, get(t, h, "/job?queue=plain&id=a")), `data-testid="job-timeout">the worker's<`)
	require.Contains(t, requireOK(t, get(t, h, "/job?queue=timed&id=a")), `data-testid="job-timeout">1m30s an attempt<`)
}

// estimatedSource is a Source whose counts are estimates (as pgrouter's
// of a large queue).
type estimatedSource struct {
	console.Source
	asOf time.Time
}

func (s estimatedSource) Stats(ctx context.Context) (leaserouter.Stats, error) {
	st, err := s.Source.Stats(ctx)
	st.Estimated, st.EstimatedAsOf = true, s.asOf
	return st, err
}

// TestOverviewMarksEstimatedCounts: a queue whose Stats are estimates has
// its counts marked "≈" (on the overview and the jobs page) and a note
// saying so, with the age of the statistics they come from; exact ones
// have neither.
func TestOverviewMarksEstimatedCounts(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	enqueue(t, r, "a")
	exact := console.Router("exact", r)
	asOf := time.Now().Add(-22 * time.Minute)
	h, err := console.New(console.Options{}, exact, estimatedSource{console.Router("big", r), asOf})
	require.NoError(t, err)
	body := requireOK(t, get(t, h, "/"))
	require.Contains(t, body, `data-testid="estimated"`)
	require.Equal(t, 1, strings.Count(body, `data-testid="estimated"`), "only the estimated queue")
	marked := regexp.MustCompile(`data-testid="state-count" data-state="[a-z]+">≈ `).FindAllString(body, -1)
	require.Len(t, marked, 6, "its six counts marked, not the exact queue's")
	require.Regexp(t, `data-testid="estimated-as-of">22m ago<`, body, "the statistics' age")
	require.Contains(t, testIDs(body, "estimated-as-of", "datetime"), asOf.UTC().Format(time.RFC3339Nano))
	require.NotContains(t, body, `data-testid="count-exactly"`, "a source that cannot count exactly offers no link")

	body = requireOK(t, get(t, h, "/jobs?queue=big"))
	require.Regexp(t, `data-state="pending">.*<span class="n">≈ 1</span>`, body, "the jobs page's counts marked too")
	body = requireOK(t, get(t, h, "/jobs?queue=exact"))
	require.Regexp(t, `data-state="pending">.*<span class="n">1</span>`, body)

	h, err = console.New(console.Options{}, estimatedSource{console.Router("big", newRouter(t, leaserouter.Options{})), time.Time{}})
	require.NoError(t, err)
	body = requireOK(t, get(t, h, "/"))
	require.Contains(t, body, "of unknown age", "statistics never gathered")
}

// exactCounter is an estimatedSource that can count exactly.
type exactCounter struct {
	estimatedSource
	calls *atomic.Int64
}

func (s exactCounter) ExactStats(ctx context.Context) (leaserouter.Stats, error) {
	s.calls.Add(1)
	return s.Source.Stats(ctx)
}

// TestOverviewCountsExactlyOnDemand: a queue whose counts are estimated
// and whose source can count exactly (console.ExactCounter) offers a
// "count exactly" link; following it counts that queue exactly (its
// ExactStats, not its Stats): its counts unmarked and said exact, the
// other queues' as they were.
func TestOverviewCountsExactlyOnDemand(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	enqueue(t, r, "a", "b")
	var calls atomic.Int64
	big := exactCounter{estimatedSource{console.Router("big", r), time.Now().Add(-time.Hour)}, &calls}
	other := exactCounter{estimatedSource{console.Router("other", r), time.Now()}, &calls}
	h, err := console.New(console.Options{ReadOnly: true}, big, other)
	require.NoError(t, err)
	body := requireOK(t, get(t, h, "/"))
	require.Zero(t, calls.Load(), "the overview estimates unless asked")
	require.Equal(t, []string{"./?exact=big", "./?exact=other"}, testIDs(body, "count-exactly", "href"), "one link a queue, even read-only")

	body = requireOK(t, get(t, h, "/?exact=big"))
	require.EqualValues(t, 1, calls.Load(), "ExactStats, of the queue asked only")
	require.Equal(t, 1, strings.Count(body, `data-testid="counted-exactly"`))
	require.Equal(t, []string{"./?exact=other"}, testIDs(body, "count-exactly", "href"))
	marked := regexp.MustCompile(`data-testid="state-count" data-state="[a-z]+">≈ `).FindAllString(body, -1)
	require.Len(t, marked, 6, "the other queue's six still marked, not big's")
	require.Regexp(t, `data-queue="big"(?s:.*)data-testid="state-count" data-state="pending">2<(?s:.*)data-queue="other"`, body)
}

// localTotals is a Source whose Stats totals are its own process's (as a
// pgrouter Router's are), while History, shared by every process, has
// the queue's.
type localTotals struct{ console.Source }

func (localTotals) Stats(context.Context) (leaserouter.Stats, error) {
	return leaserouter.Stats{Pending: 3}, nil // no lease granted, expired or refused here
}

func (localTotals) History(context.Context) ([]leaserouter.Minute, error) {
	now := time.Now().Truncate(time.Minute)
	return []leaserouter.Minute{
		{Start: now.Add(-2 * time.Minute), Completed: 5000, Failed: 12, Dead: 2, Expired: 1000, StaleRejected: 7},
		{Start: now.Add(-time.Minute), Completed: 10, Expired: 384},
		{Start: now},
	}, nil
}

// TestOverviewTotalsAreTheQueues: the overview's totals are the queue's,
// from History (which a backend shared by several processes keeps for
// all of them), never the totals of the Source's Stats (on such a
// backend, the console process's own).
func TestOverviewTotalsAreTheQueues(t *testing.T) {
	h, err := console.New(console.Options{}, localTotals{console.Router("q", newRouter(t, leaserouter.Options{}))})
	require.NoError(t, err)
	body := requireOK(t, get(t, h, "/"))
	for id, want := range map[string]string{"total-completed": "5,010", "total-failed": "12", "total-dead": "2",
		"total-expirations": "1,384", "total-stale": "7"} {
		require.Regexp(t, `data-testid="`+id+`">`+want+`<`, body, id)
	}
	require.NotContains(t, body, "leases granted", "no figure of the console process's own")
}

// counted is a payload that counts its marshalings.
type counted struct{ n *atomic.Int64 }

func (c counted) MarshalJSON() ([]byte, error) {
	c.n.Add(1)
	return []byte(`"counted"`), nil
}

// listSpy is a Source recording the ListParams it is asked for.
type listSpy struct {
	console.Source
	mu     sync.Mutex
	params []leaserouter.ListParams
}

func (s *listSpy) ListJSON(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[json.RawMessage], error) {
	s.mu.Lock()
	s.params = append(s.params, p)
	s.mu.Unlock()
	return s.Source.ListJSON(ctx, p)
}

// TestListPagesReadNoPayload: the jobs, dead and leases pages ask their
// Source for no payload (List with OmitPayload; Leases has none), show no
// checkpoint, and the in-process adapter marshals no payload for them;
// the job page shows both.
func TestListPagesReadNoPayload(t *testing.T) {
	r, err := leaserouter.New[counted](leaserouter.Options{MaxAttempts: 1})
	require.NoError(t, err)
	t.Cleanup(func() { closeNow(r) })
	var marshaled atomic.Int64
	for _, id := range []string{"dead", "leased", "pending"} {
		require.NoError(t, r.Enqueue(id, counted{&marshaled}))
	}
	l, err := r.TryAcquire("w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(errors.New("boom")))
	l, err = r.TryAcquire("w")
	require.NoError(t, err)
	require.NoError(t, l.Heartbeat([]byte("checkpoint 42")))
	spy := &listSpy{Source: console.Router("q", r)}
	h, err := console.New(console.Options{}, spy)
	require.NoError(t, err)

	for _, target := range []string{"/jobs?queue=q", "/jobs?queue=q&state=leased&prefix=l", "/dead?queue=q", "/leases"} {
		body := requireOK(t, get(t, h, target))
		require.NotContains(t, body, "checkpoint 42", target)
		require.NotContains(t, body, "counted", target)
	}
	require.Len(t, spy.params, 3)
	for _, p := range spy.params {
		require.True(t, p.OmitPayload, "%+v", p)
	}
	require.Zero(t, marshaled.Load(), "no payload marshaled for the list pages")

	body := requireOK(t, get(t, h, "/job?queue=q&id=leased"))
	require.Contains(t, body, "checkpoint 42", "the job page shows the checkpoint")
	require.Contains(t, body, "counted", "and the payload")
	require.EqualValues(t, 1, marshaled.Load())
}

// olderSource is a Source whose Stats was written before Stats.DeadJobs:
// it fills the deprecated Failed only.
type olderSource struct{ console.Source }

func (olderSource) Stats(context.Context) (leaserouter.Stats, error) {
	return leaserouter.Stats{Pending: 1, Failed: 2}, nil //lint:ignore SA1019 a Source written before DeadJobs
}

// TestOverviewReadsDeadJobsFromAnOlderSource: a Source filling only the
// deprecated Stats.Failed still shows its dead jobs, and its card is
// marked as trouble.
func TestOverviewReadsDeadJobsFromAnOlderSource(t *testing.T) {
	h, err := console.New(console.Options{}, olderSource{console.Router("q", newRouter(t, leaserouter.Options{}))})
	require.NoError(t, err)
	body := requireOK(t, get(t, h, "/"))
	require.Regexp(t, `data-testid="state-count" data-state="dead">2<`, body)
	require.Contains(t, body, `class="card trouble"`, "dead jobs are trouble")
}

// TestRouterSourceGetJSONCarriesErrors: a Router's Source gives the job
// with its failed attempts' records (Job.Errors), as Get does.
func TestRouterSourceGetJSONCarriesErrors(t *testing.T) {
	r := newRouter(t, leaserouter.Options{Backoff: func(int) time.Duration { return 0 }})
	enqueue(t, r, "a")
	l, err := r.TryAcquire("w1")
	require.NoError(t, err)
	require.NoError(t, l.Fail(errors.New("boom")))
	j, ok, err := console.Router("files", r).GetJSON(t.Context(), "a")
	require.NoError(t, err)
	require.True(t, ok)
	want, _ := r.Get("a")
	require.Len(t, want.Errors, 1)
	require.Equal(t, want.Errors, j.Errors)
}
