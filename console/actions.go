package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/leaserouter/leaserouter"
)

// The actions, all POSTs to "action" with the form fields
//
//	action  an Action that Mutates: one of jobActions, ActionRunNow or queueActions
//	queue   the queue's name (required)
//	id        a job's ID, repeated for several (jobActions; ActionRunNow: one)
//	id.STATE  a job's ID ticked on a row shown in STATE (a State's name:
//	          id.pending, id.dead, ...; id.failed is read as id.dead),
//	          repeated for several
//	all       "1": every job the filter below matches instead of the ids
//	          (at most MaxBulk), with state (repeated) and prefix as on
//	          the jobs page
//	back      where the result page links back to (a relative console URL)
//
// A single job named by id alone, with no filter (a job's page, the
// leases page), is the single call: its refusal is its status (404
// unknown, 409 not finished or leased) with the message. Otherwise the
// jobs go through the bulk calls of the Source (RetryMany, CancelMany,
// DeleteMany), each job with the state it was shown in — one call per
// state: the state of its row (id.STATE), the state "all" read it in, or
// for id the states of the filter (none: any) —, so a job that left that
// state since (leased meanwhile, retried meanwhile) is left alone, on a
// page with no filter too; and the result page counts the jobs done,
// those skipped because they had moved, and those refused (a state the
// action does not apply to, or gone), with the reasons.

// maxForm bounds an action's form: a page of MaxListLimit IDs fits.
const maxForm = 4 << 20

// resultPage is what an action did.
type resultPage struct {
	Action    Action
	Queue     string
	Message   string
	Done      int
	Bulk      bool // several jobs, one bulk call
	Moved     int  // skipped: no longer in the state shown
	Refused   int
	Error     string // the error that stopped a bulk action part way
	Reasons   []reason
	Truncated bool // "all matching" matched more than MaxBulk jobs
	Max       int
	JobLink   string // the job's page, for one job
	Back      string
}

type reason struct {
	Msg string
	N   int
}

func (h *handler) action(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		return errorf(http.StatusBadRequest, "cannot read the form: %v", err)
	}
	f := r.PostForm
	a := Action(f.Get("action"))
	if !a.Mutates() {
		return errorf(http.StatusBadRequest, "unknown action %q (the actions: %s)", f.Get("action"), actionList)
	}
	if err := h.authorize(r, a); err != nil {
		return err
	}
	if f.Get("queue") == "" {
		return errorf(http.StatusBadRequest, "which queue? the queue field is missing")
	}
	s, err := h.source(f.Get("queue"))
	if err != nil {
		return err
	}
	res := resultPage{Action: a, Queue: s.Queue(), Max: MaxBulk, Back: safeBack(f.Get("back"), "./")}
	if slices.Contains(queueActions, a) {
		op, verb := s.Pause, "paused"
		if a == ActionResume {
			op, verb = s.Resume, "resumed"
		}
		if err := op(r.Context()); err != nil {
			return err
		}
		h.log.Info("console: "+string(a), "queue", res.Queue)
		res.Done, res.Message = 1, fmt.Sprintf("Queue %s %s.", res.Queue, verb)
		h.render(w, r, http.StatusOK, "result", "Done", "", res)
		return nil
	}
	if a == ActionRunNow { // one job: a job's page offers it
		id := f.Get("id")
		if id == "" {
			return errorf(http.StatusBadRequest, "which job? the id field is missing")
		}
		if err := s.RunNow(r.Context(), id); err != nil {
			return err
		}
		res.Done = 1
		res.JobLink = link("job", "queue", res.Queue, "id", id)
		res.Back = safeBack(f.Get("back"), res.JobLink)
		res.Message = fmt.Sprintf("Job %s is pending: it runs now.", id)
		h.log.Info("console: "+string(a), "queue", res.Queue, "id", id)
		h.render(w, r, http.StatusOK, "result", "Done", "", res)
		return nil
	}
	lq, err := h.parseListQuery(url.Values{"queue": {res.Queue}, "state": f["state"], "kind": f["kind"], "prefix": {f.Get("prefix")}})
	if err != nil {
		return err
	}
	var shown []shownJobs
	if f.Get("all") == "1" {
		if shown, res.Truncated, err = collect(r.Context(), lq); err != nil {
			return err
		}
	} else {
		shown = ticked(f, lq.params.States)
		if len(shown) == 0 {
			return errorf(http.StatusBadRequest, "no job selected: tick some jobs, or \"all matching the filter\"")
		}
	}
	// One job named without a filter and without the state it was shown
	// in (a job's page, the leases page): the single call, its refusal a
	// status. Otherwise the bulk calls: a job that moved is left alone.
	if len(shown) == 1 && len(shown[0].ids) == 1 && shown[0].states == nil && f.Get("all") != "1" {
		id := shown[0].ids[0]
		op := map[Action]func(context.Context, string) error{ActionRetry: s.Retry, ActionCancel: s.Cancel, ActionDelete: s.Delete}[a]
		if err := op(r.Context(), id); err != nil {
			return err
		}
		res.Done = 1
		res.JobLink = link("job", "queue", res.Queue, "id", id)
		res.Back = safeBack(f.Get("back"), res.JobLink)
		res.Message = fmt.Sprintf("Job %s: %s done.", id, a)
		h.log.Info("console: "+string(a), "queue", res.Queue, "id", id)
		h.render(w, r, http.StatusOK, "result", "Done", "", res)
		return nil
	}
	bulk := map[Action]func(context.Context, []string, []leaserouter.State) (leaserouter.BulkResult, error){
		ActionRetry: s.RetryMany, ActionCancel: s.CancelMany, ActionDelete: s.DeleteMany}[a]
	// Each job is acted on only if it is still in the state it was shown
	// in: one that moved since is left alone. A call that fails ends the
	// action with what the calls before it and that one did.
	var br leaserouter.BulkResult
	for _, g := range shown {
		var got leaserouter.BulkResult
		got, err = bulk(r.Context(), g.ids, g.states)
		br.Done, br.Moved = br.Done+got.Done, br.Moved+got.Moved
		br.NotApplicable, br.NotFound = br.NotApplicable+got.NotApplicable, br.NotFound+got.NotFound
		if err != nil {
			break
		}
	}
	if err != nil && br == (leaserouter.BulkResult{}) {
		return err
	}
	status := http.StatusOK
	if err != nil { // stopped part way (ErrFull): what was done, and why it stopped
		status, res.Error = statusOf(err), err.Error()
	}
	res.Bulk = true
	res.Done, res.Moved, res.Refused = br.Done, br.Moved, br.NotApplicable+br.NotFound
	for _, rs := range []reason{
		{"moved since shown (no longer in the state shown): left alone", br.Moved},
		{notApplicable[a], br.NotApplicable},
		{"not found (gone meanwhile)", br.NotFound},
	} {
		if rs.N > 0 {
			res.Reasons = append(res.Reasons, rs)
		}
	}
	res.Message = fmt.Sprintf("%s: %s done, %s skipped because they had moved, %s refused.", a, num(res.Done), num(res.Moved), num(res.Refused))
	h.log.Info("console: "+string(a), "queue", res.Queue, "done", res.Done, "moved", res.Moved, "refused", res.Refused,
		"truncated", res.Truncated, "error", res.Error)
	h.render(w, r, status, "result", "Done", "", res)
	return nil
}

// shownJobs are jobs an action names and the states they were shown in:
// one bulk call acts on each of them only if it is still in one of
// states (nil: any).
type shownJobs struct {
	states []leaserouter.State
	ids    []string
}

// ticked is the jobs a form names: those of each id.STATE field with
// that state, in the order of the states; then those of id, with the
// states of the filter they were shown under (filter).
func ticked(f url.Values, filter []leaserouter.State) []shownJobs {
	var out []shownJobs
	for _, st := range allStates {
		ids := f["id."+st.String()]
		if st == leaserouter.StateDead { // a page rendered before the state was named dead
			ids = append(ids, f["id.failed"]...)
		}
		if len(ids) > 0 {
			out = append(out, shownJobs{states: []leaserouter.State{st}, ids: ids})
		}
	}
	if ids := f["id"]; len(ids) > 0 {
		out = append(out, shownJobs{states: filter, ids: ids})
	}
	return out
}

// notApplicable says, per action, why a job in a state the action does
// not apply to was refused.
var notApplicable = map[Action]string{
	ActionRetry:  "not finished (only succeeded, dead or canceled jobs can be retried)",
	ActionCancel: "already finished",
	ActionDelete: "leased (cancel it first)",
}

// collect pages through the jobs lq selects, up to MaxBulk, each with
// the state it was read in, grouped by state in the order of the states;
// truncated says more matched.
func collect(ctx context.Context, lq listQuery) (shown []shownJobs, truncated bool, err error) {
	p := lq.params
	p.Limit = leaserouter.MaxListLimit
	byState := map[leaserouter.State][]string{}
	n := 0
	for !truncated {
		page, err := lq.source.ListJSON(ctx, p)
		if err != nil {
			return nil, false, err
		}
		for _, j := range page.Jobs {
			if n == MaxBulk {
				truncated = true
				break
			}
			n++
			byState[j.State] = append(byState[j.State], j.ID)
		}
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	for _, st := range allStates {
		if ids := byState[st]; len(ids) > 0 {
			shown = append(shown, shownJobs{states: []leaserouter.State{st}, ids: ids})
		}
	}
	return shown, truncated, nil
}

// safeBack is back when it is a relative link to one of the console's
// pages (never another site's, never an absolute path), else def.
func safeBack(back, def string) string {
	u, err := url.Parse(back)
	if back == "" || err != nil || u.Scheme != "" || u.Host != "" || u.User != nil ||
		strings.HasPrefix(back, "/") || strings.HasPrefix(back, "\\") || strings.Contains(back, "\\") {
		return def
	}
	switch u.Path {
	case "", "./", "jobs", "job", "dead", "leases":
		if u.Path == "" && u.RawQuery != "" {
			return def
		}
		return back
	}
	return def
}

// actionList names the actions, for the error of an unknown one.
var actionList = func() string {
	names := make([]string, len(mutating))
	for i, a := range mutating {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}()
