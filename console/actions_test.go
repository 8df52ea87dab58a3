package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/stretchr/testify/require"
)

func TestRetryMakesDeadJobPending(t *testing.T) {
	var logged strings.Builder
	r, h := setup(t, console.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	kill(t, r, "a")
	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"retry"}, "queue": {"files"}, "id": {"a"}, "back": {"job?queue=files&id=a"}}))
	require.Contains(t, body, `data-testid="result-done">1<`)
	require.Contains(t, testIDs(body, "back-link", "href"), "job?queue=files&id=a")
	j, _ := r.Get("a")
	require.Equal(t, leaserouter.StatePending, j.State)
	require.Zero(t, j.Attempt, "a fresh attempt budget")
	require.Contains(t, requireOK(t, get(t, h, "/job?queue=files&id=a")), "state-pending")
	require.Contains(t, logged.String(), `msg="console: retry" queue=files id=a`)
}

func TestRefusedActionIs409AndChangesNothing(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "pending", "held")
	l := leaseID(t, r, "held")
	for _, c := range []struct {
		action, id, msg string
	}{
		{"retry", "pending", "job not finished"},
		{"retry", "held", "job not finished"},
		{"delete", "held", "job is leased"},
	} {
		before := r.Stats()
		w := post(t, h, "/action", url.Values{"action": {c.action}, "queue": {"files"}, "id": {c.id}})
		requireStatus(t, w, http.StatusConflict, c.msg)
		require.Equal(t, before, r.Stats(), "%s %s changed the router", c.action, c.id)
	}
	require.NoError(t, l.Heartbeat(nil), "the lease is still held")
}

func TestCancelLeasedJobRefusesItsHolder(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "a")
	l := leaseID(t, r, "a")
	body := requireOK(t, get(t, h, "/leases"))
	require.Equal(t, []string{"a"}, testIDs(body, "lease-row", "data-id"))
	requireOK(t, post(t, h, "/action", url.Values{"action": {"cancel"}, "queue": {"files"}, "id": {"a"}, "back": {"leases"}}))
	require.Equal(t, leaserouter.StateCanceled, state(t, r, "a"))
	require.ErrorIs(t, l.Heartbeat(nil), leaserouter.ErrLeaseLost)
	require.Empty(t, testIDs(requireOK(t, get(t, h, "/leases")), "lease-row", "data-id"))
}

func TestDeleteRemovesJob(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "a")
	requireOK(t, post(t, h, "/action", url.Values{"action": {"delete"}, "queue": {"files"}, "id": {"a"}}))
	_, ok := r.Get("a")
	require.False(t, ok)
	requireStatus(t, get(t, h, "/job?queue=files&id=a"), http.StatusNotFound, `no job &#34;a&#34;`)
}

func TestBulkSelectedCountsDoneAndRefused(t *testing.T) {
	r, h := setup(t, console.Options{})
	kill(t, r, "d1")
	kill(t, r, "d2")
	enqueue(t, r, "p1")
	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"retry"}, "queue": {"files"}, "id": {"d1", "d2", "p1", "gone"}}))
	require.Contains(t, body, `data-testid="result-done">2<`)
	require.Contains(t, body, `data-testid="result-refused">2<`)
	require.Contains(t, body, "not finished")
	require.Contains(t, body, "not found")
	for _, id := range []string{"d1", "d2", "p1"} {
		require.Equal(t, leaserouter.StatePending, state(t, r, id))
	}
}

func TestBulkAllMatchingTheFilter(t *testing.T) {
	r, h := setup(t, console.Options{})
	for i := range 30 {
		kill(t, r, fmt.Sprintf("a-%d", i))
	}
	kill(t, r, "b-1")
	enqueue(t, r, "a-pending")
	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"retry"}, "queue": {"files"}, "all": {"1"},
		"state": {"dead"}, "prefix": {"a-"}, "id": {"b-1"}}))
	require.Contains(t, body, `data-testid="result-done">30<`)
	require.Contains(t, body, `data-testid="result-refused">0<`)
	require.NotContains(t, body, `data-testid="result-truncated"`)
	require.Equal(t, leaserouter.StateDead, state(t, r, "b-1"), "outside the filter: the ticked ids are ignored")
	s := r.Stats()
	require.Equal(t, 1, s.DeadJobs)
	require.Equal(t, 31, s.Pending)

	requireStatus(t, post(t, h, "/action", url.Values{"action": {"retry"}, "queue": {"files"}, "all": {"1"}, "state": {"done"}}),
		http.StatusBadRequest, `unknown state &#34;done&#34;`)
}

func TestBulkAllIsBounded(t *testing.T) {
	r, h := setup(t, console.Options{})
	for i := range console.MaxBulk + 5 {
		require.NoError(t, r.Enqueue(fmt.Sprintf("j%05d", i), item{}))
	}
	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"delete"}, "queue": {"files"}, "all": {"1"}}))
	require.Contains(t, body, `data-testid="result-done">10,000<`)
	require.Contains(t, body, `data-testid="result-truncated"`)
	require.Equal(t, 5, r.Stats().Pending, "the oldest five are left")
	_, ok := r.Get("j00000")
	require.True(t, ok)
}

func TestPauseAndResumeFromOverview(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "a")
	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"pause"}, "queue": {"files"}, "back": {"./"}}))
	require.Contains(t, body, "Queue files paused.")
	require.True(t, r.Stats().Paused)
	_, err := r.TryAcquire("w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob)

	body = requireOK(t, get(t, h, "/"))
	require.Contains(t, body, `data-testid="paused-badge"`)
	require.Contains(t, body, `data-testid="resume-button"`)
	require.NotContains(t, body, `data-testid="pause-button"`)
	require.Contains(t, body, "is-paused")

	requireOK(t, post(t, h, "/action", url.Values{"action": {"resume"}, "queue": {"files"}}))
	require.False(t, r.Stats().Paused)
	require.NotContains(t, requireOK(t, get(t, h, "/")), `data-testid="paused-badge"`)
}

func TestActionAfterCloseIs409(t *testing.T) {
	r, h := setup(t, console.Options{})
	kill(t, r, "a")
	closeNow(r)
	requireStatus(t, post(t, h, "/action", url.Values{"action": {"retry"}, "queue": {"files"}, "id": {"a"}}), http.StatusConflict, "router closed")
	requireStatus(t, post(t, h, "/action", url.Values{"action": {"pause"}, "queue": {"files"}}), http.StatusConflict, "router closed")
	requireOK(t, get(t, h, "/"))
}

// TestBadInputGetsClearPageAndChangesNothing: every kind of bad request is
// an HTML page with its status and a message saying what was wrong, and
// the router is as it was.
func TestBadInputGetsClearPageAndChangesNothing(t *testing.T) {
	r, h := setup(t, console.Options{})
	kill(t, r, "dead")
	enqueue(t, r, "a", "b")
	before := r.Stats()
	form := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v
	}
	for _, c := range []struct {
		name, method, target string
		form                 url.Values
		status               int
		msg                  string
	}{
		{"unknown queue", "GET", "/jobs?queue=nope", nil, 404, `no queue &#34;nope&#34;`},
		{"unknown queue, job", "GET", "/job?queue=nope&id=a", nil, 404, `no queue &#34;nope&#34;`},
		{"unknown queue, leases", "GET", "/leases?queue=nope", nil, 404, `no queue &#34;nope&#34;`},
		{"unknown job", "GET", "/job?queue=files&id=zzz", nil, 404, `no job &#34;zzz&#34;`},
		{"no job id", "GET", "/job?queue=files", nil, 400, "id parameter is missing"},
		{"malformed cursor", "GET", "/jobs?queue=files&cursor=garbage", nil, 400, "Cursor"},
		{"cursor of another filter", "GET", "/jobs?queue=files&state=dead&cursor=" + url.QueryEscape(cursorOf(t, h)), nil, 400, "Cursor"},
		{"unknown state", "GET", "/jobs?state=done", nil, 400, `unknown state &#34;done&#34;`},
		{"bad limit", "GET", "/jobs?limit=0", nil, 400, `bad limit &#34;0&#34;`},
		{"limit too big", "GET", "/jobs?limit=1001", nil, 400, `bad limit &#34;1001&#34;`},
		{"limit not a number", "GET", "/jobs?limit=ten", nil, 400, `bad limit &#34;ten&#34;`},
		{"bad leases limit", "GET", "/leases?limit=-1", nil, 400, `bad limit &#34;-1&#34;`},
		{"unknown page", "GET", "/jobz", nil, 404, `no page &#34;jobz&#34;`},
		{"POST to a page", "POST", "/jobs", form("action", "delete"), 405, "pages are read with GET"},
		{"GET of action", "GET", "/action?action=delete&queue=files&id=a", nil, 405, "actions are POST requests"},
		{"unknown action", "POST", "/action", form("action", "explode", "queue", "files", "id", "a"), 400, `unknown action &#34;explode&#34;`},
		{"no action", "POST", "/action", form("queue", "files", "id", "a"), 400, "unknown action"},
		{"no queue", "POST", "/action", form("action", "delete", "id", "a"), 400, "queue field is missing"},
		{"unknown queue, action", "POST", "/action", form("action", "delete", "queue", "nope", "id", "a"), 404, `no queue &#34;nope&#34;`},
		{"no job selected", "POST", "/action", form("action", "delete", "queue", "files"), 400, "no job selected"},
		{"unknown job, action", "POST", "/action", form("action", "delete", "queue", "files", "id", "zzz"), 404, "job not found"},
		{"empty id, action", "POST", "/action", form("action", "cancel", "queue", "files", "id", ""), 404, "job not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w = get(t, h, c.target)
			if c.method == "POST" {
				w = post(t, h, c.target, c.form)
			}
			requireStatus(t, w, c.status, c.msg)
			if c.status == http.StatusMethodNotAllowed {
				require.NotEmpty(t, w.Header().Get("Allow"))
			}
			require.Equal(t, before, r.Stats())
			require.Equal(t, leaserouter.StatePending, state(t, r, "a"))
			require.Equal(t, leaserouter.StateDead, state(t, r, "dead"))
		})
	}
}

// cursorOf returns the next-page cursor of the jobs of every state, one
// a page.
func cursorOf(t *testing.T, h http.Handler) string {
	next := testIDs(requireOK(t, get(t, h, "/jobs?queue=files&limit=1")), "next-page", "href")
	require.Len(t, next, 1)
	u := must(url.Parse(next[0]))
	return u.Query().Get("cursor")
}

func TestReadOnlyRefusesActionsAndHidesButtons(t *testing.T) {
	r, h := setup(t, console.Options{ReadOnly: true})
	kill(t, r, "dead")
	enqueue(t, r, "a")
	for _, target := range []string{"/", "/jobs", "/dead", "/job?queue=files&id=dead", "/job?queue=files&id=a", "/leases"} {
		body := requireOK(t, get(t, h, target))
		require.NotContains(t, body, `method="post"`, target)
		for _, b := range []string{"retry-button", "cancel-button", "delete-button", "pause-button", "resume-button", "job-select", "select-all-matching"} {
			require.NotContains(t, body, `data-testid="`+b+`"`, target)
		}
		require.Contains(t, body, `data-testid="readonly-badge"`)
	}
	before := r.Stats()
	for _, a := range []string{"retry", "cancel", "delete", "pause", "resume"} {
		requireStatus(t, post(t, h, "/action", url.Values{"action": {a}, "queue": {"files"}, "id": {"dead", "a"}}),
			http.StatusForbidden, "read-only")
	}
	require.Equal(t, before, r.Stats())
	require.Equal(t, leaserouter.StateDead, state(t, r, "dead"))
}

func TestAuthorizeDecidesEveryPageAndAction(t *testing.T) {
	var asked []console.Action
	r, h := setup(t, console.Options{Authorize: func(req *http.Request, a console.Action) error {
		asked = append(asked, a)
		if req.Header.Get("X-Role") == "admin" {
			return nil
		}
		if strings.HasPrefix(string(a), "view-") || a == console.ActionRetry {
			return nil
		}
		return errors.New("only admins may " + string(a))
	}})
	kill(t, r, "dead")
	enqueue(t, r, "a")
	for target, want := range map[string]console.Action{
		"/": console.ViewOverview, "/jobs": console.ViewJobs, "/job?queue=files&id=a": console.ViewJob,
		"/leases": console.ViewLeases, "/dead": console.ViewDead,
	} {
		asked = nil
		requireOK(t, get(t, h, target))
		require.Equal(t, []console.Action{want}, asked, target)
	}
	asked = nil
	requireOK(t, get(t, h, "/healthz"))
	requireOK(t, get(t, h, "/static/console.css"))
	require.Empty(t, asked, "health and assets are not pages")

	for _, a := range []console.Action{console.ActionCancel, console.ActionDelete, console.ActionPause, console.ActionResume} {
		asked = nil
		requireStatus(t, post(t, h, "/action", url.Values{"action": {string(a)}, "queue": {"files"}, "id": {"a"}}),
			http.StatusForbidden, "only admins may "+string(a))
		require.Equal(t, []console.Action{a}, asked)
	}
	require.Equal(t, leaserouter.StatePending, state(t, r, "a"))
	require.False(t, r.Stats().Paused)

	requireOK(t, post(t, h, "/action", url.Values{"action": {"retry"}, "queue": {"files"}, "id": {"dead"}}))
	require.Equal(t, leaserouter.StatePending, state(t, r, "dead"))

	req := httptestPost("/action", url.Values{"action": {"delete"}, "queue": {"files"}, "id": {"a"}})
	req.Header.Set("X-Role", "admin")
	w := serve(h, req)
	requireOK(t, w)
	_, ok := r.Get("a")
	require.False(t, ok)

	// A refused page view.
	_, h = setup(t, console.Options{Authorize: func(*http.Request, console.Action) error { return errors.New("who are you?") }})
	requireStatus(t, get(t, h, "/"), http.StatusForbidden, "who are you?")
}

func TestCrossOriginPostIsRefused(t *testing.T) {
	r, h := setup(t, console.Options{})
	kill(t, r, "dead")
	form := url.Values{"action": {"retry"}, "queue": {"files"}, "id": {"dead"}}
	for name, hdr := range map[string]map[string]string{
		"Sec-Fetch-Site cross-site": {"Sec-Fetch-Site": "cross-site"},
		"Sec-Fetch-Site same-site":  {"Sec-Fetch-Site": "same-site"},
		"Origin of another host":    {"Origin": "https://evil.example"},
	} {
		t.Run(name, func(t *testing.T) {
			req := httptestPost("/action", form)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			requireStatus(t, serve(h, req), http.StatusForbidden, "cross-origin request")
			require.Equal(t, leaserouter.StateDead, state(t, r, "dead"))
		})
	}
	req := httptestPost("/action", form)
	req.Header.Set("Origin", "http://example.com") // httptest's Host
	requireOK(t, serve(h, req))
	require.Equal(t, leaserouter.StatePending, state(t, r, "dead"))
}

func TestBackLinkStaysInTheConsole(t *testing.T) {
	r, h := setup(t, console.Options{})
	for i, back := range []string{"https://evil.example/", "//evil.example", "/etc", `\\evil`, "javascript:alert(1)", "jobs?queue=files"} {
		id := fmt.Sprint("d", i)
		kill(t, r, id)
		body := requireOK(t, post(t, h, "/action", url.Values{"action": {"retry"}, "queue": {"files"}, "id": {id}, "back": {back}}))
		got := testIDs(body, "back-link", "href")
		want := "job?id=" + id + "&queue=files"
		if back == "jobs?queue=files" {
			want = back
		}
		require.Equal(t, []string{want}, got, back)
	}
}

// movingSource is a Source whose ListJSON runs meanwhile once, after the
// page is read: what other workers and operators do between the moment
// the console reads the jobs a filter matches and the moment it acts.
type movingSource struct {
	console.Source
	meanwhile func()
}

func (s *movingSource) ListJSON(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[json.RawMessage], error) {
	page, err := s.Source.ListJSON(ctx, p)
	if f := s.meanwhile; f != nil {
		s.meanwhile = nil
		f()
	}
	return page, err
}

// "Cancel all pending" leaves alone the job a worker leased after the
// console read the filter's jobs: its lease is held (its heartbeat
// accepted), and the result page counts it as skipped because it moved.
func TestBulkCancelAllPendingSparesJobLeasedMeanwhile(t *testing.T) {
	r := newRouter(t, leaserouter.Options{MaxAttempts: 3})
	enqueue(t, r, "a", "b", "c")
	var l *leaserouter.Lease[item]
	src := &movingSource{Source: console.Router("files", r), meanwhile: func() { l = leaseID(t, r, "b") }}
	h, err := console.New(console.Options{}, src)
	require.NoError(t, err)
	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"cancel"}, "queue": {"files"}, "all": {"1"},
		"state": {"pending"}}))
	require.NotNil(t, l)
	require.Contains(t, body, `data-testid="result-done">2<`)
	require.Contains(t, body, `data-testid="result-moved">1<`)
	require.Contains(t, body, "moved since shown")
	require.NoError(t, l.Heartbeat(nil), "the lease taken meanwhile is not canceled")
	require.Equal(t, leaserouter.StateLeased, state(t, r, "b"))
	require.Equal(t, leaserouter.StateCanceled, state(t, r, "a"))
	require.Equal(t, leaserouter.StateCanceled, state(t, r, "c"))
}

// "Delete" of dead jobs ticked on the dead page leaves alone one retried
// after the page was shown: it survives, counted as skipped because it
// moved.
func TestBulkDeleteTickedDeadSparesJobRetriedMeanwhile(t *testing.T) {
	r, h := setup(t, console.Options{})
	for _, id := range []string{"d1", "d2", "d3"} {
		kill(t, r, id)
	}
	require.NoError(t, r.Retry("d2")) // meanwhile, another operator retries one
	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"delete"}, "queue": {"files"},
		"state": {"dead"}, "id": {"d1", "d2", "d3"}}))
	require.Contains(t, body, `data-testid="result-done">2<`)
	require.Contains(t, body, `data-testid="result-moved">1<`)
	require.Equal(t, leaserouter.StatePending, state(t, r, "d2"), "the retried job survives")
	for _, id := range []string{"d1", "d3"} {
		_, ok := r.Get(id)
		require.False(t, ok, id)
	}

	// One job ticked under the filter: the same rule.
	body = requireOK(t, post(t, h, "/action", url.Values{"action": {"delete"}, "queue": {"files"},
		"state": {"dead"}, "id": {"d2"}}))
	require.Contains(t, body, `data-testid="result-done">0<`)
	require.Contains(t, body, `data-testid="result-moved">1<`)
	require.Equal(t, leaserouter.StatePending, state(t, r, "d2"), "the retried job survives")
}

// A row ticked as id.failed (the dead state's former name, on a page an
// older console rendered) is read as id.dead: the dead job is acted on.
func TestBulkReadsTickedFailedAsDead(t *testing.T) {
	r, h := setup(t, console.Options{})
	kill(t, r, "d1")
	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"retry"}, "queue": {"files"}, "id.failed": {"d1"}}))
	require.Contains(t, body, `data-testid="result-done">1<`)
	require.Equal(t, leaserouter.StatePending, state(t, r, "d1"))
}

// tickedForm is the form of the jobs page body with the rows of ids
// ticked (each checkbox's name and value as the page renders them).
func tickedForm(t *testing.T, body, action string, ids ...string) url.Values {
	t.Helper()
	form := url.Values{"action": {action}, "queue": {"files"}}
	names, values := testIDs(body, "job-select", "name"), testIDs(body, "job-select", "value")
	require.Len(t, values, len(names))
	for i, v := range values {
		if slices.Contains(ids, v) {
			form.Add(names[i], v)
		}
	}
	require.Len(t, form, 3, "a row ticked")
	return form
}

// Jobs ticked on the jobs page with no filter are each acted on only if
// still in the state their row showed: a pending job a worker leased
// since keeps its lease (skipped because it moved), ticked alone or with
// others.
func TestBulkTickedWithNoFilterSparesJobLeasedMeanwhile(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "a", "b", "c")
	body := requireOK(t, get(t, h, "/jobs?queue=files"))
	l := leaseID(t, r, "b") // meanwhile, a worker leases one

	res := requireOK(t, post(t, h, "/action", tickedForm(t, body, "cancel", "b")))
	require.Contains(t, res, `data-testid="result-done">0<`)
	require.Contains(t, res, `data-testid="result-moved">1<`)
	require.NoError(t, l.Heartbeat(nil), "the lease taken meanwhile is not canceled")

	res = requireOK(t, post(t, h, "/action", tickedForm(t, body, "cancel", "a", "b", "c")))
	require.Contains(t, res, `data-testid="result-done">2<`)
	require.Contains(t, res, `data-testid="result-moved">1<`)
	require.NoError(t, l.Heartbeat(nil), "the lease taken meanwhile is not canceled")
	require.Equal(t, leaserouter.StateLeased, state(t, r, "b"))
	require.Equal(t, leaserouter.StateCanceled, state(t, r, "a"))
	require.Equal(t, leaserouter.StateCanceled, state(t, r, "c"))
}

// "All matching the filter" with no state filter acts on each job only
// if it is still in the state it was read in: a pending job a worker
// leased after the console read the jobs keeps its lease.
func TestBulkAllWithNoStateFilterSparesJobLeasedMeanwhile(t *testing.T) {
	r := newRouter(t, leaserouter.Options{MaxAttempts: 3})
	enqueue(t, r, "a", "b", "c")
	kill(t, r, "d")
	var l *leaserouter.Lease[item]
	src := &movingSource{Source: console.Router("files", r), meanwhile: func() { l = leaseID(t, r, "b") }}
	h, err := console.New(console.Options{}, src)
	require.NoError(t, err)
	body := requireOK(t, post(t, h, "/action", url.Values{"action": {"cancel"}, "queue": {"files"}, "all": {"1"}}))
	require.NotNil(t, l)
	require.Contains(t, body, `data-testid="result-done">2<`)
	require.Contains(t, body, `data-testid="result-moved">1<`)
	require.Contains(t, body, `data-testid="result-refused">1<`, "the dead job: already finished")
	require.NoError(t, l.Heartbeat(nil), "the lease taken meanwhile is not canceled")
	require.Equal(t, leaserouter.StateLeased, state(t, r, "b"))
}
