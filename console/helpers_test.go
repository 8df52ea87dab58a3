package console_test

import (
	"context"
	"errors"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
	"github.com/stretchr/testify/require"
)

// item is the payload of the tests' jobs.
type item struct {
	Path   string `json:"path"`
	Secret string `json:"secret,omitempty"`
}

// newRouter returns a Router closed at the end of the test.
func newRouter(t *testing.T, opts leaserouter.Options) *leaserouter.Router[item] {
	t.Helper()
	r, err := leaserouter.New[item](opts)
	require.NoError(t, err)
	t.Cleanup(func() { closeNow(r) })
	return r
}

// closeNow closes r revoking the leases still held, rather than waiting
// for them to expire.
func closeNow[T any](r *leaserouter.Router[T]) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = r.Close(ctx)
}

// setup returns a Router (queue "files") and its console.
func setup(t *testing.T, opts console.Options) (*leaserouter.Router[item], http.Handler) {
	t.Helper()
	r := newRouter(t, leaserouter.Options{MaxAttempts: 3})
	h, err := console.New(opts, console.Router("files", r))
	require.NoError(t, err)
	return r, h
}

func enqueue(t *testing.T, r *leaserouter.Router[item], ids ...string) {
	t.Helper()
	for _, id := range ids {
		require.NoError(t, r.Enqueue(id, item{Path: "/src/" + id}))
	}
}

// kill makes the job id dead: leased and failed permanently.
func kill(t *testing.T, r *leaserouter.Router[item], id string) {
	t.Helper()
	enqueue(t, r, id)
	lease := leaseID(t, r, id)
	require.NoError(t, lease.Fail(leaserouter.Permanent(errors.New("disk on fire: "+id))))
	j, _ := r.Get(id)
	require.Equal(t, leaserouter.StateDead, j.State)
}

// leaseID leases jobs until it holds id's (the others are released).
func leaseID(t *testing.T, r *leaserouter.Router[item], id string) *leaserouter.Lease[item] {
	t.Helper()
	var others []*leaserouter.Lease[item]
	defer func() {
		for _, l := range others {
			require.NoError(t, l.Release())
		}
	}()
	for {
		l, err := r.TryAcquire("worker-7")
		require.NoError(t, err, "job %s never leased", id)
		if l.JobID == id {
			return l
		}
		others = append(others, l)
	}
}

func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
	return w
}

// post sends form as a same-origin browser does.
func post(t *testing.T, h http.Handler, target string, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func requireOK(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	require.Equal(t, http.StatusOK, w.Code, "body:\n%s", w.Body)
	return w.Body.String()
}

// requireStatus checks an error page: its status, its message, and that it
// is a page of the console, not a panic's stack.
func requireStatus(t *testing.T, w *httptest.ResponseRecorder, status int, msg string) {
	t.Helper()
	body := w.Body.String()
	require.Equal(t, status, w.Code, "body:\n%s", body)
	require.Contains(t, w.Header().Get("Content-Type"), "text/html")
	require.Contains(t, body, `data-testid="error-message"`)
	require.Contains(t, body, msg)
	require.NotContains(t, body, "goroutine ")
	require.NotContains(t, body, ".go:")
}

var hrefRE = regexp.MustCompile(`(?:href|src|action)="([^"]*)"`)

// links returns the href, src and action attributes of body, unescaped.
func links(body string) []string {
	var out []string
	for _, m := range hrefRE.FindAllStringSubmatch(body, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// testIDs returns the value of attr on each element with data-testid=id.
func testIDs(body, id, attr string) []string {
	re := regexp.MustCompile(`<[^>]*data-testid="` + regexp.QuoteMeta(id) + `"[^>]*>`)
	var out []string
	for _, tag := range re.FindAllString(body, -1) {
		m := regexp.MustCompile(`\s` + regexp.QuoteMeta(attr) + `="([^"]*)"`).FindStringSubmatch(tag)
		if m != nil {
			out = append(out, html.UnescapeString(m[1]))
		}
	}
	return out
}

func state(t *testing.T, r *leaserouter.Router[item], id string) leaserouter.State {
	t.Helper()
	j, ok := r.Get(id)
	require.True(t, ok, "job %s is gone", id)
	return j.State
}

func httptestPost(target string, form url.Values) *http.Request {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func serveGet(h http.Handler, target string) *httptest.ResponseRecorder {
	return serve(h, httptest.NewRequest(http.MethodGet, target, nil))
}

func httptestRequest(method, target string) *http.Request {
	return httptest.NewRequest(method, target, nil)
}
