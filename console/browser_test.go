package console_test

// Browser tests: the console in real headless Chromium (Debian's
// chromium, driven by chromedp), against a live in-process Router on a
// real HTTP server, mounted under a prefix. They skip, saying why, on a
// machine without Chromium, unless LEASEROUTER_REQUIRE_BROWSER=1 (CI sets
// it), which makes a missing browser a failure.
//
// LEASEROUTER_WRITE_SCREENSHOTS=<dir> also writes the overview's
// screenshot there (the README's docs/console.png comes from it):
//
//	LEASEROUTER_WRITE_SCREENSHOTS=$PWD/../docs go test -run TestBrowser ./...

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
)

// chromium returns the path of the browser, or skips t (fails it when
// LEASEROUTER_REQUIRE_BROWSER=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("LEASEROUTER_REQUIRE_BROWSER") == "1" {
		t.Fatal("LEASEROUTER_REQUIRE_BROWSER=1 and no chromium on PATH (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH: the browser tests need Debian's chromium (set LEASEROUTER_REQUIRE_BROWSER=1 to fail instead)")
	return ""
}

// browser is a headless Chromium tab on a console served under /ops/,
// recording every console error and uncaught exception of its pages.
type browser struct {
	ctx  context.Context
	base string // the console's URL, ending in /ops/

	mu     sync.Mutex
	errors []string
}

// browserBudget bounds each browser test, generously: a busy CI machine
// starts Chromium slowly.
const browserBudget = 2 * time.Minute

func newBrowser(t *testing.T, h http.Handler) *browser {
	t.Helper()
	exe := chromium(t)
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserBudget)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	b := &browser{ctx: bctx, base: srv.URL + "/ops/"}
	require.NoError(t, chromedp.Do(bctx), "start Chromium")

	var wg sync.WaitGroup
	messages := chromedp.Console(bctx)
	wg.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				b.mu.Lock()
				b.errors = append(b.errors, m.String())
				b.mu.Unlock()
			}
		}
	})
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	wg.Go(func() { // the confirm() of Cancel and Delete: accepted
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	})
	t.Cleanup(func() {
		bcancel()
		acancel()
		cancel()
		wg.Wait()
		b.mu.Lock()
		defer b.mu.Unlock()
		require.Empty(t, b.errors, "errors in the browser's console")
	})
	return b
}

func (b *browser) do(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(b.ctx, actions...))
}

// navigate runs a that makes the page navigate (a click on a link or a
// form's button), and returns once the new page has loaded: not before,
// when what the next step looks for might still be the old page's.
func (b *browser) navigate(t *testing.T, a chromedp.Action[chromedp.Void]) {
	t.Helper()
	_, err := chromedp.RunResponse(b.ctx, a)
	require.NoError(t, err)
}

// sel is a data-testid selector.
func sel(id string) chromedp.CSS { return chromedp.CSS(fmt.Sprintf(`[data-testid=%q]`, id)) }

// text returns the text of the first element matching css.
func (b *browser) text(t *testing.T, css chromedp.CSS) string {
	t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(css))
	require.NoError(t, err)
	return strings.TrimSpace(s)
}

// count returns how many elements match css.
func (b *browser) count(t *testing.T, css chromedp.CSS) int {
	t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, string(css))))
	require.NoError(t, err)
	return n
}

// TestBrowserOverviewFilterDeadAndRetry: the overview shows the queue's
// counts with its dead jobs; the dead filter lists them; retrying one from
// its page makes it pending, as the job page and the Router say.
func TestBrowserOverviewFilterDeadAndRetry(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "doc-003.txt", "doc-004.txt")
	kill(t, r, "img-001.png")
	kill(t, r, "img-002.png")
	l, err := r.TryAcquire("indexer-7")
	require.NoError(t, err)
	require.NoError(t, l.Complete())
	b := newBrowser(t, h)

	b.do(t, chromedp.Navigate(b.base), chromedp.WaitVisible(sel("queue-card")))
	require.Equal(t, "files", b.text(t, sel("queue-name")))
	require.Equal(t, "2", b.text(t, sel("state-count")+`[data-state="dead"]`))
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // 100: PNG
	require.NoError(t, err)
	require.Greater(t, len(png), 10_000, "a screenshot of the overview")
	if dir := os.Getenv("LEASEROUTER_WRITE_SCREENSHOTS"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "console.png"), png, 0o644))
	}

	// The dead jobs, by the state filter of the jobs page.
	b.navigate(t, chromedp.Click(sel("nav-jobs")))
	b.do(t, chromedp.WaitVisible(sel("filter-form")), chromedp.SetValue(sel("filter-state"), "dead"))
	b.navigate(t, chromedp.Click(sel("filter-submit")))
	b.do(t, chromedp.WaitVisible(sel("jobs-table")))
	require.Equal(t, 2, b.count(t, sel("job-row")))
	require.Equal(t, 2, b.count(t, sel("job-row")+`[data-state="dead"]`))
	require.Equal(t, "dead", b.text(t, sel("job-row")+` .state`), "the state shown in the row")

	// Retry one from its page.
	b.navigate(t, chromedp.Click(sel("job-row")+`[data-id="img-001.png"] `+sel("job-link")))
	b.do(t, chromedp.WaitVisible(sel("job-id")))
	require.Equal(t, "img-001.png", b.text(t, sel("job-id")))
	b.navigate(t, chromedp.Click(sel("job-actions")+" "+sel("retry-button")))
	b.do(t, chromedp.WaitVisible(sel("result-message")))
	b.navigate(t, chromedp.Click(sel("back-link")))
	b.do(t, chromedp.WaitVisible(sel("job-state")))
	require.Contains(t, b.text(t, sel("job-state")), "pending")
	j, ok := r.Get("img-001.png")
	require.True(t, ok)
	require.Equal(t, leaserouter.StatePending, j.State)
	require.Zero(t, j.Attempt, "a fresh attempt budget")
}

// TestBrowserJobPageListsEveryFailedAttempt: the job page of a job that
// failed twice lists both attempts, newest first, each with its
// number, worker and error.
func TestBrowserJobPageListsEveryFailedAttempt(t *testing.T) {
	r := newRouter(t, leaserouter.Options{MaxAttempts: 5, Backoff: func(int) time.Duration { return 0 }})
	h, err := console.New(console.Options{}, console.Router("files", r))
	require.NoError(t, err)
	enqueue(t, r, "report.pdf")
	for _, f := range []struct{ worker, err string }{{"indexer-1", "timeout talking to S3"}, {"indexer-2", "disk full"}} {
		l, err := r.TryAcquire(f.worker)
		require.NoError(t, err)
		require.NoError(t, l.Fail(errors.New(f.err)))
	}
	b := newBrowser(t, h)

	b.do(t, chromedp.Navigate(b.base+"job?queue=files&id=report.pdf"), chromedp.WaitVisible(sel("job-id")))
	require.Equal(t, 2, b.count(t, sel("attempt-error")))
	row := func(n int) chromedp.CSS {
		return sel("attempt-error") + chromedp.CSS(fmt.Sprintf(":nth-child(%d) ", n))
	}
	require.Equal(t, "2", b.text(t, row(1)+sel("attempt-error-attempt")), "newest first")
	require.Equal(t, "indexer-2", b.text(t, row(1)+sel("attempt-error-worker")))
	require.Equal(t, "disk full", b.text(t, row(1)+sel("attempt-error-text")))
	require.Equal(t, "1", b.text(t, row(2)+sel("attempt-error-attempt")))
	require.Equal(t, "indexer-1", b.text(t, row(2)+sel("attempt-error-worker")))
	require.Equal(t, "timeout talking to S3", b.text(t, row(2)+sel("attempt-error-text")))
}

// TestBrowserCancelLeasedJob: canceling a leased job from the leases page
// ends its lease: the holder's next heartbeat is refused.
func TestBrowserCancelLeasedJob(t *testing.T) {
	r, h := setup(t, console.Options{})
	enqueue(t, r, "video-1.mp4")
	l, err := r.TryAcquire("transcoder-3")
	require.NoError(t, err)
	b := newBrowser(t, h)

	b.do(t, chromedp.Navigate(b.base+"leases"), chromedp.WaitVisible(sel("leases-table")))
	row := sel("lease-row") + `[data-id="video-1.mp4"]`
	require.Equal(t, "transcoder-3", b.text(t, row+" "+sel("lease-holder")))
	require.Contains(t, strings.ReplaceAll(b.text(t, row+" "+sel("lease-token")), ",", ""), fmt.Sprint(l.Token))
	b.navigate(t, chromedp.Click(row+" "+sel("cancel-button"))) // its confirm() accepted
	b.do(t, chromedp.WaitVisible(sel("result-message")))
	require.ErrorIs(t, l.Heartbeat(nil), leaserouter.ErrLeaseLost, "the holder's next heartbeat is refused")
	j, _ := r.Get("video-1.mp4")
	require.Equal(t, leaserouter.StateCanceled, j.State)
}

// TestBrowserPagesThroughAThousandJobs: following "next page" from the
// first page of 1,000 jobs shows each exactly once, newest first.
func TestBrowserPagesThroughAThousandJobs(t *testing.T) {
	r, h := setup(t, console.Options{})
	for i := range 1000 {
		require.NoError(t, r.Enqueue(fmt.Sprintf("job-%04d", i), item{Path: "/src"}))
	}
	b := newBrowser(t, h)
	b.do(t, chromedp.Navigate(b.base+"jobs?limit=200"), chromedp.WaitVisible(sel("jobs-table")))
	var seen []string
	for page := 0; ; page++ {
		require.Less(t, page, 10, "more pages than 1,000 jobs make")
		ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid="job-row"]')].map(e => e.dataset.id)`))
		require.NoError(t, err)
		seen = append(seen, ids...)
		if b.count(t, sel("next-page")) == 0 {
			break
		}
		b.navigate(t, chromedp.Click(sel("next-page")))
		b.do(t, chromedp.WaitVisible(sel("jobs-table")))
	}
	require.Len(t, seen, 1000)
	for i, id := range seen {
		require.Equal(t, fmt.Sprintf("job-%04d", 999-i), id, "newest first, each once")
	}
}

// TestBrowserLiveRefreshCountsExactlyOnce: the overview counted exactly
// on demand (?exact=) is refreshed live without counting exactly again:
// the refreshed page shows the estimates and the link again, and the
// source's ExactStats ran once.
func TestBrowserLiveRefreshCountsExactlyOnce(t *testing.T) {
	r := newRouter(t, leaserouter.Options{})
	enqueue(t, r, "a", "b")
	var calls atomic.Int64
	h, err := console.New(console.Options{}, exactCounter{estimatedSource{console.Router("big", r), time.Now()}, &calls})
	require.NoError(t, err)
	b := newBrowser(t, h)
	b.do(t, chromedp.Navigate(b.base+"?exact=big"), chromedp.WaitVisible(sel("counted-exactly")))
	require.EqualValues(t, 1, calls.Load())
	require.Zero(t, b.count(t, sel("count-exactly")))
	b.do(t, chromedp.WaitVisible(sel("refresh-select")), chromedp.SetValue(sel("refresh-select"), "2"))
	_, err = chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.getElementById("refresh").dispatchEvent(new Event("change"))`))
	require.NoError(t, err)
	b.do(t, chromedp.WaitVisible(sel("count-exactly"))) // refreshed
	require.EqualValues(t, 1, calls.Load(), "the refresh did not count exactly again")
	require.Zero(t, b.count(t, sel("counted-exactly")))
}

// TestBrowserFiltersByKind: on the console of a Client's queues, the
// jobs page's kind filter lists the kind's jobs only, and canceling "all
// matching the filter" from there cancels those and no job of another
// kind; a job's page shows its kind and metadata.
func TestBrowserFiltersByKind(t *testing.T) {
	ctx := t.Context()
	c, mail, digest, _ := newClient(t)
	for _, id := range []string{"welcome-1", "welcome-2", "welcome-3"} {
		require.NoError(t, mail.Enqueue(ctx, id, email{To: id + "@example.com"}))
	}
	for _, id := range []string{"weekly-1", "weekly-2"} {
		require.NoError(t, digest.Enqueue(ctx, id, email{To: "list@example.com"}, leaserouter.WithMetadata(map[string]string{"tenant": "acme"})))
	}
	h, err := console.New(console.Options{}, console.Client(c)...)
	require.NoError(t, err)
	b := newBrowser(t, h)

	b.do(t, chromedp.Navigate(b.base+"jobs?queue=mail"), chromedp.WaitVisible(sel("filter-form")))
	require.Equal(t, 5, b.count(t, sel("job-row")))
	b.do(t, chromedp.SetValue(sel("filter-kind"), "digest"))
	b.navigate(t, chromedp.Click(sel("filter-submit")))
	b.do(t, chromedp.WaitVisible(sel("jobs-table")))
	require.Equal(t, 2, b.count(t, sel("job-row")))
	require.Equal(t, 2, b.count(t, sel("job-row")+`[data-kind="digest"]`))
	require.Equal(t, "digest", b.text(t, sel("job-row")+" "+sel("job-kind")))

	b.do(t, chromedp.Click(sel("select-all-matching")))
	b.navigate(t, chromedp.Click(sel("jobs-form")+" "+sel("cancel-button"))) // its confirm() accepted
	b.do(t, chromedp.WaitVisible(sel("result-message")))
	for _, id := range []string{"weekly-1", "weekly-2", "welcome-1", "welcome-2", "welcome-3"} {
		j, ok := c.Queue("mail").Get(id)
		require.True(t, ok)
		want := leaserouter.StatePending
		if j.Kind == "digest" {
			want = leaserouter.StateCanceled
		}
		require.Equal(t, want, j.State, id)
	}

	b.do(t, chromedp.Navigate(b.base+"job?queue=mail&id=weekly-1"), chromedp.WaitVisible(sel("job-id")))
	require.Equal(t, "digest", b.text(t, sel("job-kind")))
	require.Equal(t, "tenant\tacme", b.text(t, sel("metadata-pair")))
}
