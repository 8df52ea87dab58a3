package pgrouter_test

import (
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// A Router of any payload type is a console.Source as it is, and one
// that counts exactly on demand: raw JSON, or a struct.
var (
	_ console.Source       = (*pgrouter.Router[json.RawMessage])(nil)
	_ console.ExactCounter = (*pgrouter.Router[json.RawMessage])(nil)
	_ console.Source       = (*pgrouter.Router[consoleEmail])(nil)
	_ console.Source       = (*pgrouter.Queue)(nil) // a Client's queue
	_ console.ExactCounter = (*pgrouter.Router[consoleEmail])(nil)
)

// consoleEmail is a typed payload shown on the console.
type consoleEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// TestConsoleShowsATypedRouter: a Router[T] of a struct is a Source as
// it is: its jobs are listed, and a job's page shows its payload as the
// JSON in the table, never decoded into T, so a job whose payload does
// not decode into T (another process's, on the same queue) is shown all
// the same, where Get fails.
func TestConsoleShowsATypedRouter(t *testing.T) {
	r, db := newRouter[consoleEmail](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "welcome-1", consoleEmail{To: "ada@example.com", Subject: "<hello>"}))
	raw := routerOn[json.RawMessage](t, db, pgrouter.Options{})
	require.NoError(t, raw.Enqueue(ctx, "odd-1", json.RawMessage(`["not", "an", "email"]`)))
	_, _, err := r.Get(ctx, "odd-1")
	require.Error(t, err, "Get decodes into T")

	body := consoleBody(t, "/jobs?queue="+pgrouter.DefaultQueue, r)
	require.Equal(t, []string{"odd-1", "welcome-1"}, testIDsOf(body, "job-row", "data-id"))

	body = consoleBody(t, "/job?queue="+pgrouter.DefaultQueue+"&id=welcome-1", r)
	payload := regexp.MustCompile(`(?s)data-testid="payload">(.*?)</pre>`).FindStringSubmatch(body)
	require.NotNil(t, payload, body)
	var got consoleEmail
	require.NoError(t, json.Unmarshal([]byte(html.UnescapeString(payload[1])), &got))
	require.Equal(t, consoleEmail{To: "ada@example.com", Subject: "<hello>"}, got)
	require.NotContains(t, payload[1], "<hello>", "escaped")

	body = consoleBody(t, "/job?queue="+pgrouter.DefaultQueue+"&id=odd-1", r)
	require.Contains(t, html.UnescapeString(body), `"not",`)

	j, ok, err := r.GetJSON(ctx, "welcome-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, `{"to":"ada@example.com","subject":"<hello>"}`, string(j.Payload))
	page, err := r.ListJSON(ctx, leaserouter.ListParams{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2)
	require.JSONEq(t, `["not","an","email"]`, string(page.Jobs[0].Payload))
	_, err = r.List(ctx, leaserouter.ListParams{})
	require.Error(t, err, "List decodes into T")
}

// consoleBody is the body of GET target of a console over sources.
func consoleBody(t *testing.T, target string, sources ...console.Source) string {
	t.Helper()
	h, err := console.New(console.Options{}, sources...)
	require.NoError(t, err)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
	require.Equal(t, http.StatusOK, w.Code, "%s", w.Body)
	return w.Body.String()
}

// TestConsoleOverviewHasEveryProcesssTotals: the overview of a console
// in one process shows the queue's totals of the last hour, those of the
// other processes' work included (History, from the table), not the
// console process's own Stats totals.
func TestConsoleOverviewHasEveryProcesssTotals(t *testing.T) {
	worker, db := newRouter[json.RawMessage](t, pgrouter.Options{MaxAttempts: 1, PollInterval: 50 * time.Millisecond})
	ctx := t.Context()
	for _, id := range []string{"dead", "canceled"} {
		require.NoError(t, worker.Enqueue(ctx, id, json.RawMessage(`1`)))
	}
	l, err := worker.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Fail(ctx, io.ErrUnexpectedEOF)) // one attempt: dead
	l, err = worker.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, worker.Cancel(ctx, l.JobID))
	require.ErrorIs(t, l.Complete(ctx), leaserouter.ErrLeaseLost) // a stale rejection

	// The worker adds what it counted to the history every PollInterval.
	consoleProcess := routerOn[json.RawMessage](t, db, pgrouter.Options{})
	var body string
	eventually(t, 10*time.Second, "the worker's counts in the history", func() bool {
		body = consoleBody(t, "/", consoleProcess)
		return strings.Contains(body, `data-testid="total-stale">1<`)
	})
	for id, want := range map[string]string{"total-completed": "0", "total-failed": "1", "total-dead": "1",
		"total-expirations": "0", "total-stale": "1"} {
		require.Regexp(t, `data-testid="`+id+`">`+want+`<`, body, id)
	}
}

// TestConsoleCountsExactlyOverPostgres: a queue counted from the
// planner's statistics shows its counts as estimates with the age of the
// last ANALYZE, and a link that counts them exactly (ExactStats).
func TestConsoleCountsExactlyOverPostgres(t *testing.T) {
	r, db := newRouter[json.RawMessage](t, countOpts(pgrouter.DefaultQueue))
	pgrouter.SetCountCap(r, 10)
	addJobs(t, db, pgrouter.DefaultQueue, "p", leaserouter.StatePending, 40, false)
	_, err := db.Exec(t.Context(), "ANALYZE leaserouter_jobs")
	require.NoError(t, err)
	addJobs(t, db, pgrouter.DefaultQueue, "q", leaserouter.StatePending, 10, false) // since the ANALYZE

	body := consoleBody(t, "/", r)
	require.Regexp(t, `data-testid="state-count" data-state="pending">≈ [0-9,]+<`, body, "the estimate")
	require.Regexp(t, `data-testid="estimated-as-of">[0-9.]+m?s ago<`, body, "their age")
	require.Equal(t, []string{"./?exact=" + pgrouter.DefaultQueue}, testIDsOf(body, "count-exactly", "href"))

	body = consoleBody(t, "/?exact="+pgrouter.DefaultQueue, r)
	require.Regexp(t, `data-testid="state-count" data-state="pending">50<`, body, "counted exactly")
	require.Contains(t, body, `data-testid="counted-exactly"`)
	require.NotContains(t, body, `data-testid="estimated"`)
}

// testIDsOf returns the value of attr on each element of body with
// data-testid=id.
func testIDsOf(body, id, attr string) []string {
	re := regexp.MustCompile(`<[^>]*data-testid="` + regexp.QuoteMeta(id) + `"[^>]*>`)
	var out []string
	for _, tag := range re.FindAllString(body, -1) {
		if m := regexp.MustCompile(`\s` + regexp.QuoteMeta(attr) + `="([^"]*)"`).FindStringSubmatch(tag); m != nil {
			out = append(out, html.UnescapeString(m[1]))
		}
	}
	return out
}

// TestConsoleOverPostgres: the console serves a pgrouter queue: every
// page, every action (each seen in the database), and the refusals (an
// unknown job or queue, a bad cursor or state, Retry of an unfinished
// job, Delete of a leased one, a cross-origin POST, read-only), each with
// its status and nothing changed.
func TestConsoleOverPostgres(t *testing.T) {
	r, _ := newRouter[json.RawMessage](t, pgrouter.Options{MaxAttempts: 1})
	ctx := t.Context()
	for _, id := range []string{"dead.png", "held.png", "wait.png", "gone.png"} {
		require.NoError(t, r.Enqueue(ctx, id, json.RawMessage(`{"path":"/img/`+id+`"}`)))
	}
	l, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "dead.png", l.JobID)
	require.NoError(t, l.Fail(ctx, leaserouter.Permanent(io.ErrUnexpectedEOF)))
	held, err := r.TryAcquire(ctx, "holder-9")
	require.NoError(t, err)
	require.Equal(t, "held.png", held.JobID)

	serve := func(opts console.Options) string {
		h, err := console.New(opts, r)
		require.NoError(t, err)
		srv := httptest.NewServer(http.StripPrefix("/ops", h))
		t.Cleanup(srv.Close)
		return srv.URL + "/ops/"
	}
	base, readOnly := serve(console.Options{}), serve(console.Options{ReadOnly: true})
	do := func(req *http.Request) (int, string) {
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	get := func(url string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		return do(req)
	}
	post := func(url, form string, header ...string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, url+"action", strings.NewReader(form))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		return do(req)
	}
	q := "queue=" + pgrouter.DefaultQueue
	state := func(id string) leaserouter.State {
		j, ok, err := r.Get(ctx, id)
		require.NoError(t, err)
		if !ok {
			return 255
		}
		return j.State
	}

	for _, p := range []struct{ path, want string }{
		{"", pgrouter.DefaultQueue},
		{"jobs?" + q, "wait.png"},
		{"jobs?" + q + "&state=dead", "dead.png"},
		{"jobs?" + q + "&state=failed", "dead.png"}, // the dead state's former name
		{"dead?" + q, "dead.png"},
		{"leases", "holder-9"},
		{"job?" + q + "&id=held.png", "holder-9"},
		{"job?" + q + "&id=dead.png", "/img/dead.png"},
		{"healthz", "ok"},
	} {
		code, body := get(base + p.path)
		require.Equal(t, http.StatusOK, code, "%s: %s", p.path, body)
		require.Contains(t, body, p.want, p.path)
	}
	for _, p := range []struct {
		path string
		code int
	}{
		{"job?" + q + "&id=nobody", http.StatusNotFound},
		{"jobs?queue=nowhere", http.StatusNotFound},
		{"jobs?" + q + "&cursor=garbage", http.StatusBadRequest},
		{"jobs?" + q + "&state=sleeping", http.StatusBadRequest},
	} {
		code, body := get(base + p.path)
		require.Equal(t, p.code, code, "%s: %s", p.path, body)
	}

	// Refusals: nothing changes.
	for _, c := range []struct {
		name, url, form string
		header          []string
		code            int
	}{
		{"retry of a pending job", base, q + "&id=wait.png&action=retry", nil, http.StatusConflict},
		{"delete of a leased job", base, q + "&id=held.png&action=delete", nil, http.StatusConflict},
		{"cross-origin", base, q + "&id=dead.png&action=retry", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, http.StatusForbidden},
		{"read-only", readOnly, q + "&id=dead.png&action=retry", nil, http.StatusForbidden},
		{"unknown job", base, q + "&id=nobody&action=retry", nil, http.StatusNotFound},
	} {
		code, body := post(c.url, c.form, c.header...)
		require.Equal(t, c.code, code, "%s: %s", c.name, body)
	}
	require.Equal(t, leaserouter.StateDead, state("dead.png"))
	require.Equal(t, leaserouter.StateLeased, state("held.png"))
	require.Equal(t, leaserouter.StatePending, state("wait.png"))

	// The actions, each seen in the database.
	for _, c := range []struct{ form string }{
		{q + "&id=dead.png&action=retry"},
		{q + "&id=held.png&action=cancel"},
		{q + "&id=gone.png&action=delete"},
		{q + "&action=pause"},
	} {
		code, body := post(base, c.form)
		require.Equal(t, http.StatusOK, code, "%s: %s", c.form, body)
	}
	require.Equal(t, leaserouter.StatePending, state("dead.png"), "retried")
	require.Equal(t, leaserouter.StateCanceled, state("held.png"), "canceled")
	require.ErrorIs(t, held.Heartbeat(ctx, nil), leaserouter.ErrLeaseLost, "the holder's next heartbeat refused")
	require.Equal(t, leaserouter.State(255), state("gone.png"), "deleted")
	st, err := r.Stats(ctx)
	require.NoError(t, err)
	require.True(t, st.Paused)
	_, err = r.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "paused from the console")
	code, body := post(base, q+"&action=resume")
	require.Equal(t, http.StatusOK, code, body)
	st, err = r.Stats(ctx)
	require.NoError(t, err)
	require.False(t, st.Paused)
}

// TestConsoleShowsKindsAndMetadataOverPostgres: the console of a typed
// Router serving one kind shows every kind's jobs of its queue: the
// jobs page filters by kind (kind=, repeated), and a job's page shows
// the kind, the metadata and the payload of a job of another kind, whose
// payload is another type, as the table's JSON.
func TestConsoleShowsKindsAndMetadataOverPostgres(t *testing.T) {
	r, db := newRouter[consoleEmail](t, pgrouter.Options{Kind: "email"})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "welcome-1", consoleEmail{To: "ada@example.com"}))
	reports := routerOn[json.RawMessage](t, db, pgrouter.Options{Kind: "report"})
	require.NoError(t, reports.Enqueue(ctx, "march", json.RawMessage(`{"month": 3}`),
		leaserouter.WithMetadata(map[string]string{"tenant": "<acme>", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})))
	q := "queue=" + pgrouter.DefaultQueue

	body := consoleBody(t, "/jobs?"+q, r)
	require.Equal(t, []string{"march", "welcome-1"}, testIDsOf(body, "job-row", "data-id"))
	require.Equal(t, []string{"report", "email"}, testIDsOf(body, "job-row", "data-kind"))
	body = consoleBody(t, "/jobs?"+q+"&kind=report", r)
	require.Equal(t, []string{"march"}, testIDsOf(body, "job-row", "data-id"))
	body = consoleBody(t, "/jobs?"+q+"&kind=report&kind=email", r)
	require.Equal(t, []string{"march", "welcome-1"}, testIDsOf(body, "job-row", "data-id"))

	body = consoleBody(t, "/job?"+q+"&id=march", r)
	require.Contains(t, body, `data-testid="job-kind">report<`)
	require.Contains(t, body, `<th scope="row">tenant</th><td>&lt;acme&gt;</td>`)
	require.Contains(t, body, `<th scope="row">traceparent</th><td>00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01</td>`)
	require.Contains(t, html.UnescapeString(body), `"month": 3`)
}
