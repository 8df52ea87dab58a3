package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leaserouter/leaserouter"
)

//go:embed templates/*.html static/*
var assets embed.FS

// pageTemplate is the layout with one page's content.
type pageTemplate struct{ t *template.Template }

// pageNames are the templates in templates/, one per page.
var pageNames = []string{"overview", "jobs", "job", "leases", "result", "error"}

func parsePages() (map[string]*pageTemplate, error) {
	out := map[string]*pageTemplate{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets,
			"templates/layout.html", "templates/parts.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		out[name] = &pageTemplate{t}
	}
	return out, nil
}

// layout is what every page's template gets: the frame and the page's own
// data in Body.
type layout struct {
	Title    string // the console's
	Page     string // the page's heading and window title
	Nav      string // which nav entry is current: overview, jobs, leases, dead
	ReadOnly bool
	Version  string    // of the static assets
	Now      time.Time // the instant the page was rendered
	Queues   []string
	Body     any
}

// render writes page name with status: into a buffer first, so that a
// template failure is an error page rather than half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, heading, nav string, body any) {
	queues := make([]string, len(h.sources))
	for i, s := range h.sources {
		queues[i] = s.Queue()
	}
	data := layout{Title: h.opts.Title, Page: heading, Nav: nav, ReadOnly: h.opts.ReadOnly,
		Version: h.version, Now: time.Now(), Queues: queues, Body: body}
	var buf bytes.Buffer
	if err := h.pages[name].t.Execute(&buf, data); err != nil {
		h.log.Error("console: rendering", "page", name, "err", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintln(w, "console: the page could not be rendered")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

var funcs = template.FuncMap{
	"num":       num,
	"state":     func(s leaserouter.State) string { return s.String() },
	"when":      when,
	"expires":   expires,
	"ago":       ago,
	"waited":    waited,
	"noBeat":    noBeat,
	"rfc3339":   func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"isoshort":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"link":      link,
	"terminal":  func(s leaserouter.State) bool { return s.Terminal() },
	"leased":    func(s leaserouter.State) bool { return s == leaserouter.StateLeased },
	"scheduled": func(s leaserouter.State) bool { return s == leaserouter.StateScheduled },
	"states":    func() []leaserouter.State { return allStates },
	"progress":  progressText,
	"short":     shorten,
}

// allStates are the states in the order of their constants.
var allStates = []leaserouter.State{leaserouter.StatePending, leaserouter.StateScheduled, leaserouter.StateLeased,
	leaserouter.StateSucceeded, leaserouter.StateDead, leaserouter.StateCanceled}

// num formats an integer with thousands separators: 1234567 -> "1,234,567".
func num(v any) string {
	var s string
	switch n := v.(type) {
	case int:
		s = strconv.Itoa(n)
	case int64:
		s = strconv.FormatInt(n, 10)
	case uint64:
		s = strconv.FormatUint(n, 10)
	case leaserouter.Token:
		s = strconv.FormatInt(int64(n), 10)
	default:
		return fmt.Sprint(v)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// when is t relative to now ("in 12s", "3m ago"), "" for the zero Time.
func when(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now)
	if d >= 0 {
		return "in " + human(d)
	}
	return human(-d) + " ago"
}

// expires is a lease's expiry t relative to now, as the pages print it:
// "in 37m 44s" (human), or "expired" once t has passed. console.js
// counts it down in the same words.
func expires(t, now time.Time) string {
	if !t.After(now) {
		return "expired"
	}
	return "in " + human(t.Sub(now))
}

// noBeat reports whether a lease granted at leasedAt has had no
// heartbeat: the job's UpdatedAt is still the grant. A backend that
// leaves LeasedAt zero (unknown) is taken to have had one: UpdatedAt is
// shown, as before LeasedAt existed.
func noBeat(leasedAt, updated time.Time) bool {
	return !leasedAt.IsZero() && !updated.After(leasedAt)
}

// waited is how long since t, as human says it ("3m 12s"): a queue's
// latency from Stats.ReadySince.
func waited(t, now time.Time) string { return human(max(0, now.Sub(t))) }

func ago(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	return human(max(0, now.Sub(t))) + " ago"
}

// human is d (not negative), rounded for reading, in its two largest
// units: "850ms", "4.2s", "5s", "44s", "37m 44s", "2h 5m", "5d 3h" (a zero
// lower unit left out: "4m", "2h"). Every duration the pages print goes
// through it, and console.js's countdown (tick) writes the same words.
func human(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second && d.Round(100*time.Millisecond)%time.Second != 0:
		return fmt.Sprintf("%.1fs", d.Round(100*time.Millisecond).Seconds())
	case d.Round(time.Second) < time.Minute:
		return fmt.Sprintf("%ds", d.Round(time.Second)/time.Second)
	case d.Round(time.Second) < time.Hour:
		return twoUnits(d.Round(time.Second), time.Minute, "m", time.Second, "s")
	case d.Round(time.Minute) < 2*day:
		return twoUnits(d.Round(time.Minute), time.Hour, "h", time.Minute, "m")
	}
	return twoUnits(d.Round(time.Hour), day, "d", time.Hour, "h")
}

// twoUnits is d in whole big units and the small ones left ("37m 44s"),
// the small ones left out when none.
func twoUnits(d, big time.Duration, bigName string, small time.Duration, smallName string) string {
	s := fmt.Sprintf("%d%s", d/big, bigName)
	if rest := d % big / small; rest > 0 {
		s += fmt.Sprintf(" %d%s", rest, smallName)
	}
	return s
}

// link is a relative URL: page with the query of the key, value pairs
// (a []string value repeats its key; empty values are left out).
func link(page string, kv ...any) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		k := fmt.Sprint(kv[i])
		switch v := kv[i+1].(type) {
		case []string:
			for _, s := range v {
				q.Add(k, s)
			}
		case string:
			if v != "" {
				q.Set(k, v)
			}
		default:
			q.Set(k, fmt.Sprint(v))
		}
	}
	if page == "" {
		page = "./"
	}
	if len(q) == 0 {
		return page
	}
	return page + "?" + q.Encode()
}

// progressText shows a checkpoint: as text when it is printable UTF-8,
// else as its length and first bytes in hex.
func progressText(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	printable := strings.ToValidUTF8(string(p), "\uFFFD") == string(p) &&
		!strings.ContainsFunc(string(p), func(r rune) bool { return r < ' ' && r != '\n' && r != '\t' })
	if printable {
		return string(p)
	}
	return fmt.Sprintf("%d bytes: %x", len(p), p[:min(len(p), 64)])
}

// shorten cuts s to n runes with an ellipsis.
func shorten(n int, s string) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// prettyJSON indents raw, or returns it as text when it is not JSON.
func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}
