package delivery_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/delivery"
)

// kind is an entry's kind, its String the name reports give it.
type kind string

func (k kind) String() string { return string(k) }

// entry is the fake backend's queue entry: an event of job, or a report
// entry (report set).
type entry struct {
	job    string
	report string
}

// what a hook does: "" returns, "panic" panics, "goexit" calls
// runtime.Goexit.
func act(what string) {
	switch what {
	case "panic":
		panic("boom")
	case "goexit":
		runtime.Goexit()
	}
}

// fake is a backend's side of delivery that records every call, in order,
// in a log shared with its Logger and slog.Default's handler. onEvent,
// log and logger say what OnEvent, Log and the Logger's handler do with
// an entry (by job) or a report (by message prefix).
type fake struct {
	mu       sync.Mutex
	calls    []string
	onEvent  map[string]string
	log      map[string]string
	logger   func(msg string) string // what the Logger's handler does with a report
	noLogger bool
}

func (f *fake) add(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fake) IsReport(r *entry) bool               { return r.report != "" }
func (f *fake) Report(r *entry) (string, string)     { return r.report, r.job }
func (f *fake) Kind(r *entry) (fmt.Stringer, string) { return kind("k"), r.job }
func (f *fake) Deliver(r *entry, c *delivery.Cursor) {
	if c.OnEventDue() {
		f.add("OnEvent " + r.job)
		act(f.onEvent[r.job])
	}
	c.LoggerNext()
	f.add("Log " + r.job)
	act(f.log[r.job])
}
func (f *fake) Panicked() { f.add("panicked") }
func (f *fake) Progress(c *delivery.Cursor) {
	f.add(fmt.Sprint("progress ", c.Delivered()))
}
func (f *fake) Logger() *slog.Logger {
	if f.noLogger {
		return nil
	}
	return slog.New(handler{f, "report", func(msg string) string {
		if f.logger == nil {
			return ""
		}
		return f.logger(msg)
	}})
}

// handler records each record's message as "<name>: msg job_id=j" and
// then does what act says.
type handler struct {
	f    *fake
	name string
	act  func(msg string) string
}

func (h handler) Enabled(context.Context, slog.Level) bool { return true }
func (h handler) Handle(_ context.Context, r slog.Record) error {
	var job string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "job_id" {
			job = a.Value.String()
		}
		return true
	})
	h.f.add(fmt.Sprintf("%s: %s job_id=%s", h.name, r.Message, job))
	act(h.act(r.Message))
	return nil
}
func (h handler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h handler) WithGroup(string) slog.Handler      { return h }

// run delivers batch as a backend's delivery goroutine does: Deliver in a
// goroutine, and after a hook's runtime.Goexit, Exited in its deferred
// function and a new goroutine going on from the same cursor. It returns
// how many goroutines it took, or 100 if that many did not end the
// batch (a cursor that does not step past a Goexit).
func run(f *fake, batch []entry) (goroutines int) {
	var c delivery.Cursor
	for goroutines < 100 {
		goroutines++
		exited := make(chan bool)
		go func() {
			goexit := true
			defer func() {
				if goexit {
					delivery.Exited(&c, batch, f)
				}
				exited <- goexit
			}()
			delivery.Deliver(&c, batch, f)
			goexit = false
		}()
		if !<-exited {
			return goroutines
		}
	}
	return goroutines
}

// useDefault makes slog.Default() record into f's log as "default: ...",
// for the test.
func useDefault(t *testing.T, f *fake) {
	prev := slog.Default()
	slog.SetDefault(slog.New(handler{f, "default", func(string) string { return "" }}))
	t.Cleanup(func() { slog.SetDefault(prev) })
}

func events(jobs ...string) []entry {
	b := make([]entry, len(jobs))
	for i, j := range jobs {
		b[i].job = j
	}
	return b
}

// TestDeliverStepsThroughHooks: each row's hooks misbehave as named; the
// calls, reports and counts are exactly those listed, and delivery goes
// on to the end of the batch.
func TestDeliverStepsThroughHooks(t *testing.T) {
	for _, tt := range []struct {
		name       string
		f          *fake
		batch      []entry
		goroutines int
		want       []string
	}{
		{name: "every hook returns", batch: events("a", "b"), goroutines: 1,
			want: []string{"OnEvent a", "Log a", "OnEvent b", "Log b", "progress 2"}},
		{name: "OnEvent panics: reported through the Logger, which still gets the event",
			f: &fake{onEvent: map[string]string{"a": "panic"}}, batch: events("a", "b"), goroutines: 1,
			want: []string{"OnEvent a", "panicked", "report: leaserouter: OnEvent panicked on k: boom job_id=a",
				"Log a", "OnEvent b", "Log b", "progress 2"}},
		{name: "OnEvent panics with no Logger: reported to slog.Default",
			f: &fake{onEvent: map[string]string{"a": "panic"}, noLogger: true}, batch: events("a", "b"), goroutines: 1,
			want: []string{"OnEvent a", "panicked", "default: leaserouter: OnEvent panicked on k: boom job_id=a",
				"Log a", "OnEvent b", "Log b", "progress 2"}},
		{name: "the Logger panics on an event: reported to slog.Default, the next event follows",
			f: &fake{log: map[string]string{"a": "panic"}}, batch: events("a", "b"), goroutines: 1,
			want: []string{"OnEvent a", "Log a", "panicked", "default: leaserouter: Logger handler panicked on k: boom job_id=a",
				"OnEvent b", "Log b", "progress 2"}},
		{name: "the Logger panics on the report of OnEvent's panic: to slog.Default, both counted",
			f:     &fake{onEvent: map[string]string{"a": "panic"}, logger: func(string) string { return "panic" }},
			batch: events("a", "b"), goroutines: 1,
			want: []string{"OnEvent a", "panicked", "report: leaserouter: OnEvent panicked on k: boom job_id=a",
				"default: leaserouter: OnEvent panicked on k: boom job_id=a", "panicked", "Log a", "OnEvent b", "Log b", "progress 2"}},
		{name: "OnEvent calls Goexit: counted, reported by the next goroutine, the Logger still gets the event",
			f: &fake{onEvent: map[string]string{"a": "goexit"}}, batch: events("a", "b"), goroutines: 2,
			want: []string{"OnEvent a", "panicked", "report: leaserouter: OnEvent called runtime.Goexit on k job_id=a",
				"Log a", "OnEvent b", "Log b", "progress 2"}},
		{name: "the Logger calls Goexit on an event: counted, reported, the next event follows",
			f: &fake{log: map[string]string{"a": "goexit"}}, batch: events("a", "b"), goroutines: 2,
			want: []string{"OnEvent a", "Log a", "panicked", "report: leaserouter: Logger handler called runtime.Goexit on k job_id=a",
				"OnEvent b", "Log b", "progress 2"}},
		{name: "the Logger calls Goexit on the last event: the next goroutine reports it and ends the batch",
			f: &fake{log: map[string]string{"b": "goexit"}}, batch: events("a", "b"), goroutines: 2,
			want: []string{"OnEvent a", "Log a", "OnEvent b", "Log b", "panicked",
				"report: leaserouter: Logger handler called runtime.Goexit on k job_id=b", "progress 2"}},
		{name: "the Logger calls Goexit while reporting OnEvent's panic: only the report is skipped",
			f:     &fake{onEvent: map[string]string{"a": "panic"}, logger: func(string) string { return "goexit" }},
			batch: events("a", "b"), goroutines: 2,
			want: []string{"OnEvent a", "panicked", "report: leaserouter: OnEvent panicked on k: boom job_id=a", "panicked",
				"Log a", "OnEvent b", "Log b", "progress 2"}},
		{name: "the Logger calls Goexit while reporting, then on a later event: that event's Goexit is stepped past too",
			f: &fake{onEvent: map[string]string{"a": "panic"}, log: map[string]string{"b": "goexit"},
				logger: func(msg string) string {
					return map[bool]string{true: "goexit"}[strings.Contains(msg, "OnEvent panicked")]
				}},
			batch: events("a", "b"), goroutines: 3,
			want: []string{"OnEvent a", "panicked", "report: leaserouter: OnEvent panicked on k: boom job_id=a", "panicked",
				"Log a", "OnEvent b", "Log b", "panicked",
				"report: leaserouter: Logger handler called runtime.Goexit on k job_id=b", "progress 2"}},
		{name: "the Logger calls Goexit while reporting OnEvent's Goexit: only the report is skipped",
			f:     &fake{onEvent: map[string]string{"a": "goexit"}, logger: func(string) string { return "goexit" }},
			batch: events("a", "b"), goroutines: 3,
			want: []string{"OnEvent a", "panicked", "report: leaserouter: OnEvent called runtime.Goexit on k job_id=a", "panicked",
				"Log a", "OnEvent b", "Log b", "progress 2"}},
		{name: "OnEvent and the Logger both call Goexit on every event: each event reaches both, once",
			f:     &fake{onEvent: map[string]string{"a": "goexit", "b": "goexit"}, log: map[string]string{"a": "goexit", "b": "goexit"}},
			batch: events("a", "b"), goroutines: 5,
			want: []string{"OnEvent a", "panicked", "report: leaserouter: OnEvent called runtime.Goexit on k job_id=a",
				"Log a", "panicked", "report: leaserouter: Logger handler called runtime.Goexit on k job_id=a",
				"OnEvent b", "panicked", "report: leaserouter: OnEvent called runtime.Goexit on k job_id=b",
				"Log b", "panicked", "report: leaserouter: Logger handler called runtime.Goexit on k job_id=b", "progress 2"}},
		{name: "a report entry is logged through the Logger, never given to OnEvent",
			batch: []entry{{job: "a"}, {job: "r", report: "leaserouter: Backoff(1) panicked"}, {job: "b"}}, goroutines: 1,
			want: []string{"OnEvent a", "Log a", "report: leaserouter: Backoff(1) panicked job_id=r", "OnEvent b", "Log b", "progress 3"}},
		{name: "the Logger panics on a report entry: to slog.Default, counted",
			f:     &fake{logger: func(string) string { return "panic" }},
			batch: []entry{{job: "r", report: "leaserouter: Backoff(1) panicked"}, {job: "b"}}, goroutines: 1,
			want: []string{"report: leaserouter: Backoff(1) panicked job_id=r",
				"default: leaserouter: Backoff(1) panicked job_id=r", "panicked", "OnEvent b", "Log b", "progress 2"}},
		{name: "the Logger calls Goexit on a report entry: only that report is skipped",
			f:     &fake{logger: func(msg string) string { return map[bool]string{true: "goexit"}[strings.Contains(msg, "Backoff")] }},
			batch: []entry{{job: "r", report: "leaserouter: Backoff(1) panicked"}, {job: "b"}}, goroutines: 2,
			want: []string{"report: leaserouter: Backoff(1) panicked job_id=r", "panicked", "OnEvent b", "Log b", "progress 2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := cmp.Or(tt.f, &fake{})
			useDefault(t, f)
			require.Equal(t, tt.goroutines, run(f, tt.batch), "delivery goroutines")
			require.Equal(t, tt.want, f.calls)
		})
	}
}

// TestDeliverProgressCadence: Progress is told every
// contract.ProgressEvery entries and once at the batch's end, with the
// entries delivered since it was last told, whether a hook panicked or
// called Goexit meanwhile or not.
func TestDeliverProgressCadence(t *testing.T) {
	require.Equal(t, 256, contract.ProgressEvery)
	for _, tt := range []struct {
		n    int
		bad  map[string]string
		want []int
	}{
		{n: 1, want: []int{1}},
		{n: 255, want: []int{255}},
		{n: 256, want: []int{256}},
		{n: 257, want: []int{256, 1}},
		{n: 600, want: []int{256, 256, 88}},
		{n: 300, bad: map[string]string{"j100": "panic"}, want: []int{256, 44}},
		{n: 300, bad: map[string]string{"j255": "goexit"}, want: []int{256, 44}},
		{n: 300, bad: map[string]string{"j256": "goexit"}, want: []int{256, 44}},
		{n: 300, bad: map[string]string{"j299": "goexit"}, want: []int{256, 44}},
	} {
		t.Run(fmt.Sprint(tt.n, tt.bad), func(t *testing.T) {
			f := &fake{onEvent: tt.bad, noLogger: true}
			useDefault(t, f)
			batch := make([]entry, tt.n)
			for i := range batch {
				batch[i].job = fmt.Sprint("j", i)
			}
			run(f, batch)
			var got []int
			ons := 0
			for _, c := range f.calls {
				var n int
				if _, err := fmt.Sscanf(c, "progress %d", &n); err == nil {
					got = append(got, n)
				}
				if strings.HasPrefix(c, "OnEvent ") {
					ons++
				}
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.n, ons, "OnEvent got every event once")
		})
	}
}

// TestDeliverEmptyBatch: an empty batch calls no hook and tells Progress
// of nothing.
func TestDeliverEmptyBatch(t *testing.T) {
	f := &fake{}
	require.Equal(t, 1, run(f, nil))
	require.Equal(t, []string{"progress 0"}, f.calls)
}
