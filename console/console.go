package console

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/leaserouter/leaserouter"
)

// Options configures a console. The zero value is a console with every
// page and action allowed to every request that reaches it: mount it
// behind the service's own authentication, or set Authorize.
type Options struct {
	// ReadOnly refuses every action (403) and hides their buttons; the
	// pages stay readable.
	ReadOnly bool
	// Authorize is called for every page view and every action, before it
	// is done, with the Action it is; an error refuses it with 403 and the
	// error's message on the page. Nil allows everything. A bulk action
	// is authorized once, as its Action; the request's form (queue, ids,
	// filter) is readable from r. It is not called for /healthz nor for
	// the static assets (CSS, JS). It may be called concurrently.
	Authorize func(r *http.Request, a Action) error
	// Redact returns the payload to show on a job's page, given the
	// queue's name, the job's ID and its payload as JSON; nil shows it as
	// is. What it returns is shown as JSON if it is valid JSON, else as
	// text. It may be called concurrently.
	Redact func(queue, id string, payload json.RawMessage) json.RawMessage
	// Title is shown in the header and the window title; "" means
	// DefaultTitle.
	Title string
	// Logger receives a line per action done (Info) and per backend
	// failure (Error); nil logs nothing.
	Logger *slog.Logger
}

// DefaultTitle is the console's title when Options.Title is "".
const DefaultTitle = "leaserouter"

// Action is what a request asks of the console, as Options.Authorize is
// told: viewing a page, or one of the actions (always POST).
type Action string

// The actions. View* are page views (GET or HEAD); the others change jobs
// or queues, and ReadOnly refuses them all.
const (
	ViewOverview Action = "view-overview" // the overview: counts, charts, Pause/Resume buttons
	ViewJobs     Action = "view-jobs"     // the jobs list of a queue, with its filter
	ViewJob      Action = "view-job"      // one job's page, its payload (through Redact) included
	ViewLeases   Action = "view-leases"   // the live leases
	ViewDead     Action = "view-dead"     // the dead jobs of a queue with their errors
	// CountExactly: the overview with "?exact=queue", a queue's jobs
	// counted exactly (ExactCounter: a read of every job of the queue),
	// asked after ViewOverview. Not a change: ReadOnly allows it.
	CountExactly Action = "count-exactly"

	ActionRetry Action = "retry" // Source.Retry: a finished job runs again
	// ActionRunNow: Source.RunNow, a scheduled job (delayed, or a retry
	// waiting out its backoff) runs now; one job at a time (a job's page).
	ActionRunNow Action = "run-now"
	ActionCancel Action = "cancel" // Source.Cancel: a job not finished is canceled (its lease lost)
	ActionDelete Action = "delete" // Source.Delete: a job not leased is removed
	ActionPause  Action = "pause"  // Source.Pause: the queue grants no lease until Resume
	ActionResume Action = "resume" // Source.Resume
)

// The actions that change state, the one list of them: those on jobs
// (one, several, or all a filter matches) and those on a queue.
var (
	jobActions   = []Action{ActionRetry, ActionCancel, ActionDelete}
	queueActions = []Action{ActionPause, ActionResume}
	mutating     = slices.Concat(jobActions, []Action{ActionRunNow}, queueActions)
)

// Mutates reports whether a changes a queue or a job (an action, not a
// view): what a read-only role is refused.
func (a Action) Mutates() bool { return slices.Contains(mutating, a) }

// MaxBulk is the most jobs one "all matching the filter" action handles
// (leaserouter.MaxBulkIDs, the most one RetryMany, CancelMany or
// DeleteMany takes); the result page says when more matched (submit it
// again for the rest).
const MaxBulk = leaserouter.MaxBulkIDs

// handler is the console: the http.Handler New returns.
type handler struct {
	opts    Options
	sources []Source
	byName  map[string]Source
	pages   map[string]*pageTemplate
	static  fs.FS
	version string // of the static assets, for their URLs (cache busting)
	cop     *http.CrossOriginProtection
	log     *slog.Logger
	exact   exactCounts // the overview's exact counts running
}

// New returns the console of sources, an http.Handler to mount under any
// path prefix (behind http.StripPrefix: every link it makes is relative),
// e.g.
//
//	mux.Handle("/ops/jobs/", http.StripPrefix("/ops/jobs", h))
//
// Its pages are "" (the overview), "jobs", "job", "leases" and "dead";
// actions are POSTs to "action"; "healthz" answers 200 "ok" when every
// source's Stats does, else 503 with the error. Cross-origin POSTs are
// refused (net/http.CrossOriginProtection), every response says noindex,
// and bad input gets an HTML page with its status (400, 403, 404, 405,
// 409), never a 500. The sources are shown in the order given. New
// returns an error wrapping leaserouter.ErrInvalidOptions for no
// sources, a nil one, one with an empty Queue(), or two with the same
// Queue(). The handler is safe for concurrent use.
func New(opts Options, sources ...Source) (http.Handler, error) {
	if len(sources) == 0 {
		return nil, fmt.Errorf("%w: console.New: no sources", leaserouter.ErrInvalidOptions)
	}
	h := &handler{opts: opts, sources: sources, byName: map[string]Source{}, cop: http.NewCrossOriginProtection()}
	for i, s := range sources {
		if s == nil {
			return nil, fmt.Errorf("%w: console.New: source %d is nil", leaserouter.ErrInvalidOptions, i)
		}
		q := s.Queue()
		if q == "" {
			return nil, fmt.Errorf("%w: console.New: source %d has an empty queue name", leaserouter.ErrInvalidOptions, i)
		}
		if _, dup := h.byName[q]; dup {
			return nil, fmt.Errorf("%w: console.New: two sources named %q", leaserouter.ErrInvalidOptions, q)
		}
		h.byName[q] = s
	}
	h.opts.Title = cmp.Or(opts.Title, DefaultTitle)
	h.log = opts.Logger
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if h.pages, err = parsePages(); err != nil {
		return nil, err // a bug in the embedded templates; tests catch it
	}
	h.static, _ = fs.Sub(assets, "static")
	h.version = assetVersion(h.static)
	return h, nil
}

// assetVersion is a short hash of the static assets.
func assetVersion(fsys fs.FS) string {
	sum := sha256.New()
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(fsys, p)
			sum.Write([]byte(p))
			sum.Write(b)
		}
		return nil
	})
	return hex.EncodeToString(sum.Sum(nil))[:12]
}

// httpError is a response other than 200: its status and what to say.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status, fmt.Sprintf(format, args...)}
}

// ServeHTTP routes the request to its page.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("X-Robots-Tag", "noindex, nofollow")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "same-origin")
	hdr.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
	if err := h.cop.Check(r); err != nil {
		h.fail(w, r, errorf(http.StatusForbidden, "refused: %v", err))
		return
	}
	path := r.URL.Path
	if !strings.HasPrefix(path, "/") { // mounted with StripPrefix("/x/")
		path = "/" + path
	}
	if name, ok := strings.CutPrefix(path, "/static/"); ok {
		h.serveStatic(w, r, name)
		return
	}
	if path == "/healthz" {
		h.healthz(w, r)
		return
	}
	if path == "/action" {
		if r.Method != http.MethodPost {
			hdr.Set("Allow", http.MethodPost)
			h.fail(w, r, errorf(http.StatusMethodNotAllowed, "actions are POST requests (this was %s)", r.Method))
			return
		}
		h.fail(w, r, h.action(w, r))
		return
	}
	page, ok := map[string]func(http.ResponseWriter, *http.Request) error{
		"/": h.overview, "/jobs": h.jobs, "/job": h.job, "/leases": h.leases, "/dead": h.dead,
	}[path]
	if !ok {
		h.fail(w, r, errorf(http.StatusNotFound, "no page %q here", strings.TrimPrefix(path, "/")))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		h.fail(w, r, errorf(http.StatusMethodNotAllowed, "pages are read with GET (this was %s)", r.Method))
		return
	}
	h.fail(w, r, page(w, r))
}

// authorize checks a with ReadOnly (for actions) and Options.Authorize.
func (h *handler) authorize(r *http.Request, a Action) error {
	if h.opts.ReadOnly && a.Mutates() {
		return errorf(http.StatusForbidden, "this console is read-only: %s refused", a)
	}
	if h.opts.Authorize == nil {
		return nil
	}
	if err := h.opts.Authorize(r, a); err != nil {
		return errorf(http.StatusForbidden, "not authorized to %s: %v", a, err)
	}
	return nil
}

// source returns the source named queue: the first one for "".
func (h *handler) source(queue string) (Source, error) {
	if queue == "" {
		return h.sources[0], nil
	}
	if s, ok := h.byName[queue]; ok {
		return s, nil
	}
	return nil, errorf(http.StatusNotFound, "no queue %q", queue)
}

// fail renders err, if any, as an error page with its status.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if err == nil {
		return
	}
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{statusOf(err), err.Error()}
	}
	if he.status >= 500 {
		h.log.Error("console: backend failure", "path", r.URL.Path, "err", err)
	}
	h.render(w, r, he.status, "error", "Error", "", errorPage{Status: he.status, StatusText: http.StatusText(he.status), Message: he.msg})
}

// statusOf maps a Source's error to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, leaserouter.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, leaserouter.ErrNotFinished), errors.Is(err, leaserouter.ErrLeased), errors.Is(err, leaserouter.ErrNotScheduled),
		errors.Is(err, leaserouter.ErrClosed), errors.Is(err, leaserouter.ErrFull):
		return http.StatusConflict
	case errors.Is(err, leaserouter.ErrInvalidOptions), errors.Is(err, leaserouter.ErrInvalidJob):
		return http.StatusBadRequest
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

type errorPage struct {
	Status     int
	StatusText string
	Message    string
}

// healthz answers 200 "ok" when every source's Stats answers, else 503.
func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	for _, s := range h.sources {
		if _, err := s.Stats(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "queue %q: %v\n", s.Queue(), err)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// serveStatic serves an embedded asset.
func (h *handler) serveStatic(w http.ResponseWriter, r *http.Request, name string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, errorf(http.StatusMethodNotAllowed, "assets are read with GET"))
		return
	}
	if _, err := fs.Stat(h.static, name); err != nil || name == "" || strings.Contains(name, "..") {
		h.fail(w, r, errorf(http.StatusNotFound, "no asset %q", name))
		return
	}
	if r.URL.Query().Get("v") == h.version {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	}
	http.ServeFileFS(w, r, h.static, name)
}
