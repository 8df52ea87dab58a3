package console

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"

	"github.com/leaserouter/leaserouter"
)

// The pages: overview, jobs (and dead, the jobs page of dead jobs), job,
// leases. Each reads its query, asks the sources, and renders; an error
// returned becomes the error page (ServeHTTP).

// stateCount is one state's count, linking to its jobs.
type stateCount struct {
	State string
	N     int
	Est   bool // an estimate (Stats.Estimated)
	Link  string
}

func stateCounts(queue string, s leaserouter.Stats) []stateCount {
	var out []stateCount
	for st, n := range s.ByState() {
		out = append(out, stateCount{st.String(), n, s.Estimated, link("jobs", "queue", queue, "state", st.String())})
	}
	return out
}

// queueCard is one queue on the overview.
type queueCard struct {
	Name     string
	Err      string // the source's failure, if any
	Stats    leaserouter.Stats
	Counts   []stateCount
	Chart    chart
	Hour     Totals // the last hour's History, summed: the queue's, every process's
	Trouble  bool   // dead jobs, expirations or stale rejections in the last hour, or paused
	JobsLink string
	DeadLink string
	// Counted: the counts are ExactStats', asked for by ExactLink, which
	// is set when the counts are estimated and the source can count
	// exactly (ExactCounter).
	Counted   bool
	ExactLink string
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r, ViewOverview); err != nil {
		return err
	}
	exact := r.URL.Query()["exact"]
	for _, q := range exact {
		if _, ok := h.byName[q].(ExactCounter); ok {
			if err := h.authorize(r, CountExactly); err != nil {
				return err
			}
			break
		}
	}
	// The queues' cards are read concurrently, overviewReaders at a time:
	// a card's Stats and History are round trips to the database (tens of
	// milliseconds for a large pgrouter queue), which one after another
	// would add up with the queues.
	cards := make([]queueCard, len(h.sources))
	sem := make(chan struct{}, overviewReaders)
	var wg sync.WaitGroup
	for i, s := range h.sources {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() {
				<-sem
				// A Source's panic here, off the request's goroutine, would
				// end the process (net/http recovers only its own): it is
				// the card's failure instead.
				if p := recover(); p != nil {
					cards[i].Err, cards[i].Trouble = fmt.Sprintf("panic: %v", p), true
					h.log.Error("console: overview", "queue", s.Queue(), "panic", p)
				}
			}()
			h.queueCard(r, s, slices.Contains(exact, s.Queue()), &cards[i])
		})
	}
	wg.Wait()
	h.render(w, r, http.StatusOK, "overview", "Overview", "overview", cards)
	return nil
}

// overviewReaders is how many queues' cards the overview reads at once.
const overviewReaders = 4

// queueCard fills c, s's card on the overview; exact asks for its exact
// counts (ExactCounter).
func (h *handler) queueCard(r *http.Request, s Source, exact bool, c *queueCard) {
	c.Name = s.Queue()
	c.JobsLink = link("jobs", "queue", c.Name)
	c.DeadLink = link("dead", "queue", c.Name)
	st, counted, err := queueStats(r.Context(), s, exact, &h.exact)
	if err != nil {
		c.Err, c.Trouble = err.Error(), true
		h.log.Error("console: Stats", "queue", c.Name, "err", err)
		return
	}
	c.Stats, c.Counts, c.Counted = st, stateCounts(c.Name, st), counted
	if _, ok := s.(ExactCounter); ok && st.Estimated {
		c.ExactLink = link("./", "exact", c.Name)
	}
	hist, err := s.History(r.Context())
	if err != nil {
		c.Err = "history: " + err.Error()
		h.log.Error("console: History", "queue", c.Name, "err", err)
	}
	c.Chart, c.Hour = makeChart(hist)
	// cmp.Or: a Source written before Stats.DeadJobs fills only Failed
	// (as Stats.ByState reads it too).
	dead := cmp.Or(st.DeadJobs, st.Failed) //lint:ignore SA1019 read for a Source written before DeadJobs
	c.Trouble = st.Paused || dead > 0 || c.Hour.Expired > 0 || c.Hour.StaleRejected > 0
}

// jobsPage is the jobs page (and the dead page).
type jobsPage struct {
	Dead      bool // the dead page: dead jobs only, errors first
	Queue     string
	States    []string // the filter's states (none: every state)
	State     string   // the one state the form's select shows ("" if none or several)
	Prefix    string
	Kinds     []string // the filter's kinds (none: every kind)
	Limit     int      // 0: default
	Cursor    string
	Jobs      []jobRow
	NextLink  string
	PrevLink  string // when not on the first page
	FirstLink string // when not on the first page
	Counts    []stateCount
	Action    string // where the filter form goes: jobs or dead
	Self      string // this page's link, where its actions return
	MaxBulk   int
	Offer     bulkOffer // the bulk buttons shown
}

// bulkOffer is which bulk buttons a list page shows: those whose action
// can apply to a job in one of the page's states (Retry: a finished one;
// Cancel: one not finished; Delete: one not leased). A page of every
// state offers all three. The server still judges each job as it is when
// the action runs (a button not shown, posted all the same, is refused
// per job as ever).
type bulkOffer struct{ Retry, Cancel, Delete bool }

// offerFor is the bulkOffer of a page of jobs in states (none: every
// state).
func offerFor(states []leaserouter.State) bulkOffer {
	if len(states) == 0 {
		return bulkOffer{true, true, true}
	}
	var o bulkOffer
	for _, s := range states {
		o.Retry = o.Retry || s.Terminal()
		o.Cancel = o.Cancel || !s.Terminal()
		o.Delete = o.Delete || s != leaserouter.StateLeased
	}
	return o
}

type jobRow struct {
	leaserouter.Job[json.RawMessage]
	Link string
}

// listQuery is the filter and page of a jobs or dead URL.
type listQuery struct {
	queue  string
	source Source
	states []string
	params leaserouter.ListParams
}

// parseListQuery reads queue, state (repeated), kind (repeated), prefix,
// cursor and limit. An empty state or kind is the form's "any" and
// selects nothing; a kind the backend refuses (ListParams.Kinds) is the
// List call's error, a 400.
func (h *handler) parseListQuery(q url.Values) (listQuery, error) {
	var lq listQuery
	var err error
	if lq.source, err = h.source(q.Get("queue")); err != nil {
		return lq, err
	}
	lq.queue = lq.source.Queue()
	for _, s := range q["state"] {
		if s == "" { // the form's "any state"
			continue
		}
		st, err := leaserouter.ParseState(s) // "failed" too: a link made before the state was named dead
		if err != nil {
			return lq, errorf(http.StatusBadRequest, "unknown state %q (the states: pending, scheduled, leased, succeeded, dead, canceled)", s)
		}
		lq.states = append(lq.states, st.String())
		lq.params.States = append(lq.params.States, st)
	}
	for _, k := range q["kind"] {
		if k != "" && !slices.Contains(lq.params.Kinds, k) {
			lq.params.Kinds = append(lq.params.Kinds, k)
		}
	}
	lq.params.IDPrefix = q.Get("prefix")
	lq.params.OmitPayload = true // the jobs and dead pages show neither payload nor checkpoint
	lq.params.Cursor = q.Get("cursor")
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > leaserouter.MaxListLimit {
			return lq, errorf(http.StatusBadRequest, "bad limit %q: a number of jobs per page from 1 to %d", s, leaserouter.MaxListLimit)
		}
		lq.params.Limit = n
	}
	return lq, nil
}

func (h *handler) jobs(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r, ViewJobs); err != nil {
		return err
	}
	lq, err := h.parseListQuery(r.URL.Query())
	if err != nil {
		return err
	}
	return h.listJobs(w, r, lq, false)
}

func (h *handler) dead(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r, ViewDead); err != nil {
		return err
	}
	q := r.URL.Query()
	q.Del("state")
	lq, err := h.parseListQuery(q)
	if err != nil {
		return err
	}
	lq.states, lq.params.States = []string{leaserouter.StateDead.String()}, []leaserouter.State{leaserouter.StateDead}
	return h.listJobs(w, r, lq, true)
}

func (h *handler) listJobs(w http.ResponseWriter, r *http.Request, lq listQuery, dead bool) error {
	page, err := lq.source.ListJSON(r.Context(), lq.params)
	if err != nil {
		if statusOf(err) == http.StatusBadRequest {
			return errorf(http.StatusBadRequest, "bad page request for queue %q: %v", lq.queue, err)
		}
		return err
	}
	p := jobsPage{Dead: dead, Queue: lq.queue, States: lq.states, Prefix: lq.params.IDPrefix, Kinds: lq.params.Kinds,
		Limit: lq.params.Limit, Cursor: lq.params.Cursor, Action: "jobs", MaxBulk: MaxBulk, Offer: offerFor(lq.params.States)}
	if dead {
		p.Action = "dead"
	}
	if len(lq.states) == 1 {
		p.State = lq.states[0]
	}
	states := lq.states
	if dead {
		states = nil // implied by the page
	}
	limit := ""
	if p.Limit > 0 {
		limit = strconv.Itoa(p.Limit)
	}
	for _, j := range page.Jobs {
		p.Jobs = append(p.Jobs, jobRow{j, link("job", "queue", lq.queue, "id", j.ID)})
	}
	p.Self = link(p.Action, "queue", lq.queue, "state", states, "kind", p.Kinds, "prefix", p.Prefix, "limit", limit, "cursor", p.Cursor)
	pg := pagerLinks(p.Action, []any{"queue", lq.queue, "state", states, "kind", p.Kinds, "prefix", p.Prefix, "limit", limit},
		p.Cursor, page.NextCursor, r.URL.Query()["prev"])
	p.NextLink, p.PrevLink, p.FirstLink = pg.Next, pg.Prev, pg.First
	if st, err := lq.source.Stats(r.Context()); err == nil {
		p.Counts = stateCounts(lq.queue, st)
	}
	heading, nav := "Jobs", "jobs"
	if dead {
		heading, nav = "Dead jobs", "dead"
	}
	h.render(w, r, http.StatusOK, "jobs", heading+" · "+lq.queue, nav, p)
	return nil
}

// jobPage is one job's page.
type jobPage struct {
	Queue   string
	Job     leaserouter.Job[json.RawMessage]
	Payload string // pretty JSON, through Redact
	Meta    []metaPair
	Errors  []leaserouter.AttemptError // the job's failed attempts, newest first
	Back    string                     // this page's own link, where actions return
}

// MaxErrors is how many failed attempts a job keeps, as the page says.
func (jobPage) MaxErrors() int { return leaserouter.MaxAttemptErrors }

func (h *handler) job(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r, ViewJob); err != nil {
		return err
	}
	q := r.URL.Query()
	s, err := h.source(q.Get("queue"))
	if err != nil {
		return err
	}
	id := q.Get("id")
	if id == "" {
		return errorf(http.StatusBadRequest, "which job? the id parameter is missing")
	}
	j, ok, err := s.GetJSON(r.Context(), id)
	if err != nil {
		return err
	}
	if !ok {
		return errorf(http.StatusNotFound, "no job %q in queue %q (never enqueued, deleted, or finished longer ago than the retention)", id, s.Queue())
	}
	payload := j.Payload
	if h.opts.Redact != nil {
		payload = h.opts.Redact(s.Queue(), id, payload)
	}
	p := jobPage{Queue: s.Queue(), Job: j, Payload: prettyJSON(payload), Back: link("job", "queue", s.Queue(), "id", id)}
	p.Job.Payload = nil // shown only as Payload, redacted
	p.Errors = slices.Clone(j.Errors)
	slices.Reverse(p.Errors)
	for _, k := range slices.Sorted(maps.Keys(j.Metadata)) {
		p.Meta = append(p.Meta, metaPair{k, j.Metadata[k]})
	}
	h.render(w, r, http.StatusOK, "job", "Job "+shorten(60, id), "jobs", p)
	return nil
}

// metaPair is one pair of a job's metadata, as the job page lists them:
// by key.
type metaPair struct{ Key, Value string }

// leasesPage is the leases of every queue shown (or of the one asked).
type leasesPage struct {
	Queues []leaseQueue
	Limit  int
}

type leaseQueue struct {
	Name      string
	Err       string
	Leases    []jobRow
	More      bool   // there is a next page
	Paged     bool   // not the first page
	NextLink  string // the next page of this queue's leases
	PrevLink  string // the page before (not on the first)
	FirstLink string // the first page (not on the first)
}

// maxPrevPages bounds the cursors of the pages before that a list page's
// URL (jobs, dead, leases) carries for its previous-page link (each a few dozen
// bytes); beyond it, the oldest are dropped and "first page" goes back.
const maxPrevPages = 100

// firstPageMark stands for the first page's cursor ("") among the
// cursors of the pages before (an empty value is left out of a link).
const firstPageMark = "-"

// pager is the links of a list paged by a keyset cursor: Next when there
// is a next page, Prev and First when not on the first. Each page's URL
// carries the cursors of the pages before it (prev, the first page's as
// firstPageMark), so "previous page" goes back without a query backward.
type pager struct{ Next, Prev, First string }

// pagerLinks is the pager of the page of cursor, its NextCursor next,
// after the pages of prev, on the console page named page with the
// query kv (its filters and limit).
func pagerLinks(page string, kv []any, cursor, next string, prev []string) pager {
	var p pager
	if next != "" {
		here := cmp.Or(cursor, firstPageMark)
		p.Next = link(page, append(slices.Clone(kv), "cursor", next,
			"prev", append(slices.Clone(prev[max(0, len(prev)+1-maxPrevPages):]), here))...)
	}
	if cursor != "" {
		p.First = link(page, kv...)
		if n := len(prev); n > 0 {
			before := prev[n-1]
			if before == firstPageMark {
				before = ""
			}
			p.Prev = link(page, append(slices.Clone(kv), "cursor", before, "prev", prev[:n-1])...)
		}
	}
	return p
}

func (h *handler) leases(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r, ViewLeases); err != nil {
		return err
	}
	q := r.URL.Query()
	sources := h.sources
	if name := q.Get("queue"); name != "" {
		s, err := h.source(name)
		if err != nil {
			return err
		}
		sources = []Source{s}
	}
	p := leasesPage{Limit: leaserouter.DefaultListLimit}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > leaserouter.MaxListLimit {
			return errorf(http.StatusBadRequest, "bad limit %q: a number of leases from 1 to %d", s, leaserouter.MaxListLimit)
		}
		p.Limit = n
	}
	cursor, prev := q.Get("cursor"), q["prev"]
	if cursor != "" && len(sources) != 1 {
		return errorf(http.StatusBadRequest, "a page of leases after the first is of one queue: the queue parameter is missing")
	}
	limit := ""
	if q.Get("limit") != "" {
		limit = strconv.Itoa(p.Limit)
	}
	for _, s := range sources {
		lq := leaseQueue{Name: s.Queue(), Paged: cursor != ""}
		page, err := s.LeasePageJSON(r.Context(), leaserouter.LeasesParams{Cursor: cursor, Limit: p.Limit})
		if err != nil {
			if cursor != "" && statusOf(err) == http.StatusBadRequest {
				return errorf(http.StatusBadRequest, "bad page of leases for queue %q: %v", lq.Name, err)
			}
			lq.Err = err.Error()
			h.log.Error("console: Leases", "queue", lq.Name, "err", err)
		}
		for _, j := range page.Jobs {
			lq.Leases = append(lq.Leases, jobRow{j, link("job", "queue", lq.Name, "id", j.ID)})
		}
		lq.More = page.NextCursor != ""
		pg := pagerLinks("leases", []any{"queue", lq.Name, "limit", limit}, cursor, page.NextCursor, prev)
		lq.NextLink, lq.PrevLink, lq.FirstLink = pg.Next, pg.Prev, pg.First
		p.Queues = append(p.Queues, lq)
	}
	h.render(w, r, http.StatusOK, "leases", "Leases", "leases", p)
	return nil
}
