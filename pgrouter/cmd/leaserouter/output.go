package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/leaserouter/leaserouter"
)

// What --json prints. Times are RFC 3339 in UTC; a zero time is left out.

type counts struct {
	Pending   int `json:"pending"`
	Scheduled int `json:"scheduled"`
	Leased    int `json:"leased"`
	Succeeded int `json:"succeeded"`
	Dead      int `json:"dead"`
	Canceled  int `json:"canceled"`
	Failed    int `json:"failed"` // Dead again, under the dead state's former name: deprecated, printed for one release
}

// countsOf are the counts by state, Dead under both its names.
func countsOf(pending, scheduled, leased, succeeded, dead, canceled int) counts {
	return counts{pending, scheduled, leased, succeeded, dead, canceled, dead}
}

// queueJSON is a queue of queues, or stats' queue.
type queueJSON struct {
	Queue string `json:"queue"`
	counts
	Paused    bool `json:"paused"`
	Estimated bool `json:"estimated,omitempty"` // stats: the counts are estimates
}

// jobJSON is a job of get and list.
type jobJSON struct {
	ID          string             `json:"id"`
	Queue       string             `json:"queue"`
	Kind        string             `json:"kind"`               // "" for a Router's jobs that set no Kind
	Metadata    map[string]string  `json:"metadata,omitempty"` // WithMetadata's pairs
	State       string             `json:"state"`
	Attempt     int                `json:"attempt"`
	MaxAttempts int                `json:"max_attempts"`
	Priority    int                `json:"priority"`
	Timeout     string             `json:"timeout,omitempty"` // each attempt's limit set by WithTimeout, as Go writes a duration ("1m30s"); omitted if none
	Token       uint64             `json:"token"`
	Owner       string             `json:"owner,omitempty"`
	LeaseExpiry time.Time          `json:"lease_expiry,omitzero"`
	RunAt       time.Time          `json:"run_at,omitzero"`
	LastError   string             `json:"last_error,omitempty"`
	Errors      []attemptErrorJSON `json:"errors,omitempty"`   // the failed attempts' records, oldest first (get, and list --json, which carries payloads too; the list table shows none)
	Progress    []byte             `json:"progress,omitempty"` // base64
	CreatedAt   time.Time          `json:"created_at"`
	UpdatedAt   time.Time          `json:"updated_at"`
	Payload     json.RawMessage    `json:"payload"`
}

// attemptErrorJSON is one failed attempt of a job (Job.Errors).
type attemptErrorJSON struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Worker  string    `json:"worker"`
	Error   string    `json:"error"`
}

// durationText is d as Go writes it, "" for 0.
func durationText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Round(0)
}

func jobOf(queue string, j leaserouter.Job[json.RawMessage]) jobJSON {
	var errs []attemptErrorJSON
	for _, e := range j.Errors {
		errs = append(errs, attemptErrorJSON{Attempt: e.Attempt, At: utc(e.At), Worker: e.Worker, Error: e.Error})
	}
	return jobJSON{Errors: errs, ID: j.ID, Queue: queue, State: j.State.String(), Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		Priority: j.Priority, Timeout: durationText(j.Timeout), Token: uint64(j.Token), Owner: j.Owner, LeaseExpiry: utc(j.LeaseExpiry), RunAt: utc(j.RunAt),
		LastError: j.LastError, Progress: j.Progress, CreatedAt: utc(j.CreatedAt), UpdatedAt: utc(j.UpdatedAt), Payload: j.Payload,
		Kind: j.Kind, Metadata: j.Metadata}
}

// pageJSON is a page of list.
type pageJSON struct {
	Queue      string    `json:"queue"`
	Jobs       []jobJSON `json:"jobs"`
	NextCursor string    `json:"next_cursor"` // "" on the last page
}

// actionJSON is what retry, cancel and delete did.
type actionJSON struct {
	Queue   string       `json:"queue"`
	Action  string       `json:"action"`
	Results []resultJSON `json:"results"`
}

type resultJSON struct {
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// The tables.

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// row writes cells as one line of a table.
func row(tw io.Writer, cells ...string) {
	for i, c := range cells {
		cells[i] = cell(c)
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
}

// cell is s fit for a table cell: control characters (tabs, newlines)
// shown as spaces, and "-" for empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// clip is s cut to n runes, with an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func queuesTable(w io.Writer, qs []queueJSON) error {
	tw := newTable(w)
	row(tw, "QUEUE", "PENDING", "SCHEDULED", "LEASED", "SUCCEEDED", "DEAD", "CANCELED", "PAUSED")
	for _, q := range qs {
		paused := "no"
		if q.Paused {
			paused = "yes"
		}
		row(tw, q.Queue, strconv.Itoa(q.Pending), strconv.Itoa(q.Scheduled), strconv.Itoa(q.Leased),
			strconv.Itoa(q.Succeeded), strconv.Itoa(q.Dead), strconv.Itoa(q.Canceled), paused)
	}
	return tw.Flush()
}

func listTable(w io.Writer, p pageJSON) error {
	tw := newTable(w)
	row(tw, "ID", "KIND", "STATE", "ATTEMPT", "PRIORITY", "TOKEN", "OWNER", "UPDATED", "LAST ERROR")
	for _, j := range p.Jobs {
		row(tw, j.ID, clip(j.Kind, 40), j.State, fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts), strconv.Itoa(j.Priority),
			strconv.FormatUint(j.Token, 10), j.Owner, when(j.UpdatedAt), clip(j.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	switch {
	case len(p.Jobs) == 0:
		_, err = fmt.Fprintln(w, "(no jobs)")
	case p.NextCursor != "":
		_, err = fmt.Fprintf(w, "next page: --cursor %s\n", p.NextCursor)
	}
	return err
}

func jobTable(w io.Writer, j jobJSON) error {
	tw := newTable(w)
	row(tw, "id", j.ID)
	row(tw, "queue", j.Queue)
	row(tw, "kind", j.Kind)
	row(tw, "state", j.State)
	row(tw, "attempt", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
	row(tw, "priority", strconv.Itoa(j.Priority))
	row(tw, "timeout", j.Timeout)
	row(tw, "token", strconv.FormatUint(j.Token, 10))
	row(tw, "owner", j.Owner)
	row(tw, "lease expiry", when(j.LeaseExpiry))
	row(tw, "run at", when(j.RunAt))
	row(tw, "created", when(j.CreatedAt))
	row(tw, "updated", when(j.UpdatedAt))
	row(tw, "last error", j.LastError)
	for _, e := range j.Errors { // oldest first, as a log reads
		row(tw, fmt.Sprintf("attempt %d error", e.Attempt), fmt.Sprintf("%s by %s: %s", when(e.At), cell(e.Worker), e.Error))
	}
	progress := string(j.Progress)
	if !printable(progress) {
		progress = fmt.Sprintf("%x", j.Progress)
	}
	row(tw, "progress", progress)
	for _, k := range slices.Sorted(maps.Keys(j.Metadata)) {
		row(tw, "metadata "+k, j.Metadata[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b bytes.Buffer
	if json.Indent(&b, j.Payload, "  ", "  ") != nil {
		b.Reset()
		b.Write(j.Payload)
	}
	_, err := fmt.Fprintf(w, "payload:\n  %s\n", b.Bytes())
	return err
}

// printable reports whether s is valid UTF-8 text without control
// characters.
func printable(s string) bool {
	for _, r := range s {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return false
		}
	}
	return true
}
