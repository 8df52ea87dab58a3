package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
)

// email and report are the payloads of two kinds of a Client.
type (
	email  struct{ To string }
	report struct{ Month int }
)

// newClient returns a Client (not started, so its jobs stay pending) with
// queues "mail" and "reports", and kinds "email" (mail) and "report"
// (reports), "digest" (mail); it is stopped at the end of the test.
func newClient(t *testing.T) (c *leaserouter.Client, mail, digest *leaserouter.Kind[email], rep *leaserouter.Kind[report]) {
	t.Helper()
	c, err := leaserouter.NewClient(leaserouter.ClientOptions{Queues: map[string]leaserouter.QueueConfig{"mail": {}, "reports": {}}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Stop(ctx)
	})
	noop := func(context.Context, *leaserouter.Lease[email]) error { return nil }
	mail, err = leaserouter.Register(c, "email", noop, leaserouter.WithKindQueue("mail"))
	require.NoError(t, err)
	digest, err = leaserouter.Register(c, "digest", noop, leaserouter.WithKindQueue("mail"))
	require.NoError(t, err)
	rep, err = leaserouter.Register(c, "report", func(context.Context, *leaserouter.Lease[report]) error { return nil },
		leaserouter.WithKindQueue("reports"))
	require.NoError(t, err)
	return c, mail, digest, rep
}

// rowsOf are the IDs of the jobs page's rows, in order, each with its
// kind ("id:kind").
func rowsOf(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`data-testid="job-row" data-id="([^"]*)" data-kind="([^"]*)"`).FindAllStringSubmatch(body, -1) {
		out = append(out, html.UnescapeString(m[1])+":"+html.UnescapeString(m[2]))
	}
	return out
}

// TestClientShowsEveryQueueOfAClient: console.Client gives one Source per
// queue of a core Client, in QueueNames order, each listing its queue's
// jobs of every kind with their kinds, and a job's page shows its
// payload as JSON.
func TestClientShowsEveryQueueOfAClient(t *testing.T) {
	ctx := t.Context()
	c, mail, digest, rep := newClient(t)
	require.NoError(t, mail.Enqueue(ctx, "welcome-1", email{To: "ada@example.com"}))
	require.NoError(t, digest.Enqueue(ctx, "weekly-1", email{To: "bob@example.com"}))
	require.NoError(t, rep.Enqueue(ctx, "march", report{Month: 3}))

	sources := console.Client(c)
	require.Len(t, sources, 2)
	require.Equal(t, "mail", sources[0].Queue())
	require.Equal(t, "reports", sources[1].Queue())
	h, err := console.New(console.Options{}, sources...)
	require.NoError(t, err)

	overview := requireOK(t, get(t, h, "/"))
	require.Contains(t, overview, `href="jobs?queue=mail"`)
	require.Contains(t, overview, `href="jobs?queue=reports"`)

	require.Equal(t, []string{"weekly-1:digest", "welcome-1:email"}, rowsOf(requireOK(t, get(t, h, "/jobs?queue=mail"))))
	require.Equal(t, []string{"march:report"}, rowsOf(requireOK(t, get(t, h, "/jobs?queue=reports"))))

	body := requireOK(t, get(t, h, "/job?queue=reports&id=march"))
	require.Contains(t, body, `data-testid="job-kind">report<`)
	require.Contains(t, html.UnescapeString(body), `"Month": 3`)

	// Actions act on the Client's queue.
	requireOK(t, post(t, h, "/action", url.Values{"queue": {"mail"}, "id": {"welcome-1"}, "action": {"cancel"}}))
	j, ok := c.Queue("mail").Get("welcome-1")
	require.True(t, ok)
	require.Equal(t, leaserouter.StateCanceled, j.State)

	require.Nil(t, console.Client(nil))
}

// TestJobPageShowsKindAndMetadata: a job's page shows its kind and its
// metadata, pairs by key, escaped as every field is.
func TestJobPageShowsKindAndMetadata(t *testing.T) {
	ctx := t.Context()
	c, mail, _, _ := newClient(t)
	md := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "<b>tenant</b>": `<script>alert("x")</script>`}
	require.NoError(t, mail.Enqueue(ctx, "welcome-1", email{To: "ada@example.com"}, leaserouter.WithMetadata(md)))
	require.NoError(t, mail.Enqueue(ctx, "welcome-2", email{To: "bob@example.com"}))
	h, err := console.New(console.Options{}, console.Client(c)...)
	require.NoError(t, err)

	body := requireOK(t, get(t, h, "/job?queue=mail&id=welcome-1"))
	require.Contains(t, body, `data-testid="job-kind">email<`)
	require.NotContains(t, body, "<script>alert")
	require.NotContains(t, body, "<b>tenant")
	pairs := regexp.MustCompile(`<tr data-testid="metadata-pair"><th scope="row">([^<]*)</th><td>([^<]*)</td></tr>`).FindAllStringSubmatch(body, -1)
	require.Len(t, pairs, 2, body)
	require.Equal(t, "<b>tenant</b>", html.UnescapeString(pairs[0][1]))
	require.Equal(t, `<script>alert("x")</script>`, html.UnescapeString(pairs[0][2]))
	require.Equal(t, "traceparent", pairs[1][1])
	require.Equal(t, md["traceparent"], pairs[1][2])

	body = requireOK(t, get(t, h, "/job?queue=mail&id=welcome-2"))
	require.NotContains(t, body, `data-testid="job-metadata"`, "a job without metadata has no table")
}

// TestJobsPageFiltersByKind: the jobs page's kind parameter, repeated
// for several kinds, keeps the jobs of those kinds; the filter form, the
// state chips, the next page's link and the bulk actions keep it.
func TestJobsPageFiltersByKind(t *testing.T) {
	ctx := t.Context()
	c, mail, digest, _ := newClient(t)
	for _, id := range []string{"w1", "w2", "w3"} {
		require.NoError(t, mail.Enqueue(ctx, id, email{To: id}))
	}
	for _, id := range []string{"d1", "d2"} {
		require.NoError(t, digest.Enqueue(ctx, id, email{To: id}))
	}
	h, err := console.New(console.Options{}, console.Client(c)...)
	require.NoError(t, err)

	body := requireOK(t, get(t, h, "/jobs?queue=mail&kind=digest"))
	require.Equal(t, []string{"d2:digest", "d1:digest"}, rowsOf(body))
	require.Contains(t, body, `name="kind" value="digest" data-testid="filter-kind"`, "the form shows the filter")
	require.Contains(t, body, `<input type="hidden" name="kind" value="digest">`, "the bulk form keeps it")
	require.Contains(t, body, `href="jobs?kind=digest&amp;queue=mail&amp;state=pending"`, "a state chip keeps it")

	require.Equal(t, []string{"d2:digest", "d1:digest", "w3:email", "w2:email", "w1:email"},
		rowsOf(requireOK(t, get(t, h, "/jobs?queue=mail&kind=digest&kind=email"))))
	require.Len(t, rowsOf(requireOK(t, get(t, h, "/jobs?queue=mail&kind="))), 5, "an empty kind is the form's any kind")
	require.Empty(t, rowsOf(requireOK(t, get(t, h, "/jobs?queue=mail&kind=report"))), "report's jobs are in another queue")

	// The next page's link keeps the kind, so the cursor stays valid.
	body = requireOK(t, get(t, h, "/jobs?queue=mail&kind=email&limit=2"))
	require.Equal(t, []string{"w3:email", "w2:email"}, rowsOf(body))
	next := regexp.MustCompile(`href="([^"]*)" data-testid="next-page"`).FindStringSubmatch(body)
	require.NotNil(t, next, body)
	require.Contains(t, html.UnescapeString(next[1]), "kind=email")
	require.Equal(t, []string{"w1:email"}, rowsOf(requireOK(t, get(t, h, "/"+html.UnescapeString(next[1])))))

	// A kind the API refuses is a bad request, not a failure.
	w := get(t, h, "/jobs?queue=mail&kind="+url.QueryEscape("a\x00b"))
	require.Equal(t, http.StatusBadRequest, w.Code, "%s", w.Body)

	// Cancel "all matching the filter" acts on the kind's jobs only.
	requireOK(t, post(t, h, "/action", url.Values{"queue": {"mail"}, "kind": {"digest"}, "all": {"1"}, "action": {"cancel"}}))
	page, err := c.Queue("mail").List(leaserouter.ListParams{States: []leaserouter.State{leaserouter.StateCanceled}})
	require.NoError(t, err)
	var canceled []string
	for _, j := range page.Jobs {
		canceled = append(canceled, j.ID)
	}
	require.Equal(t, []string{"d2", "d1"}, canceled)
	require.True(t, strings.HasPrefix(rowsOf(requireOK(t, get(t, h, "/jobs?queue=mail&state=pending")))[0], "w3:"))
}
