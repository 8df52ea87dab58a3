package pgrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
	listcursor "github.com/leaserouter/leaserouter/internal/cursor"
)

// The operator's side: List, Retry, Delete, Pause and Resume, as the
// core's with a ctx and an error, Queues, and the queue's name and live
// leases (Queue, Leases). Pause and Resume act on the queue in the
// database, for every process sharing it. ListJSON, GetJSON and
// LeasesJSON read the same jobs with their payloads as JSON, so that a
// Router of any payload type has the method set of console.Source
// (module github.com/leaserouter/leaserouter/console), without this
// module importing it.

// firstPage is the enqueue order a first page of List starts below: every
// seq the sequence hands out is smaller.
const firstPage = math.MaxInt64

// List returns a page of the jobs of the Router's queue that p selects,
// newest first by enqueue order (which Retry keeps), after settling what
// is due (a lease past its expiry is listed as the expiry left it; a
// finished job past its Retention is not listed). Paging is keyset, never
// by offset: a cursor names the enqueue order of its page's last job, so
// following NextCursor ("" on the last page) never skips or repeats a job
// that stays selected meanwhile, whatever is enqueued, leased or deleted,
// in this process or another (a cursor is valid in every process). Limit
// 0 means leaserouter.DefaultListLimit (100); empty States, every state;
// empty IDPrefix, every ID (compared byte by byte: no pattern
// characters; one holding a NUL, which no ID holds, selects nothing);
// empty Kinds, every kind (a job's Kind: "" for the jobs of a Router
// that sets no Options.Kind). A job of a kind the Router does not serve
// (Options.Kind) is listed with a zero Payload (its payload is another
// kind's type), unless T is json.RawMessage.
// A State outside the constants, a Limit below 0 or above
// leaserouter.MaxListLimit (1000), an IDPrefix that is not valid UTF-8
// (the database's text cannot hold it: the core's List would match IDs
// it is a byte prefix of), or a Cursor that is malformed, was made under
// other States, Kinds or IDPrefix (Limit may change) or by a Router of another
// queue (a cursor holds its queue) is an error wrapping
// ErrInvalidOptions, without a round trip. One round trip, whose cost
// grows with the page, not with the queue: each selected state (and kind)
// is read in enqueue order until a page is found, never scanned or
// sorted whole (with Kinds, the leased state's jobs of those kinds are
// found among the queue's leases in flight, at most all of them read);
// with an IDPrefix few
// of a state's newest jobs have, its jobs with the prefix are read by ID
// instead, at a cost that grows with their number, except the leased
// state's: its jobs with the prefix are found among the queue's leased
// jobs in enqueue order, their IDs compared in an index (at most the
// queue's entries there, its leases in flight, bounded by the workers of
// every process, expired leases not yet settled included, and ended
// leases not yet vacuumed, read a few hundred a page; only the hits'
// rows are read). With OmitPayload the jobs carry a zero
// Payload, a nil Progress and nil Errors and none of those columns is
// read (Metadata is
// read: it is at most leaserouter.MaxMetadataBytes), so a page costs
// the same whatever their size; otherwise a payload that does not decode
// into T fails the page with the error Get would return. List works after
// Close. A Kind breaking the rule for IDs is an error wrapping
// ErrInvalidOptions. Errors wrap the driver's. Safe for concurrent use.
func (r *Router[T]) List(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[T], error) {
	// Each selected state other than leased is a walk of the index
	// leaserouter_jobs_order_unleased that stops after a page, never a
	// scan or sort of the queue; the leased state, a walk of the index of
	// leased jobs by seq (leaserouter_jobs_leased_seq) that stops after a
	// page too: a claim writes no entry in leaserouter_jobs_order_unleased,
	// its entry in that index instead. With Kinds, one walk per state and kind (an index
	// by kind; for kind "", the walk of the state's jobs skips those of
	// other kinds), which with an IDPrefix too reads the kinds' jobs until
	// a page of them has it, except the leased state: the read of the
	// queue's leased jobs, skipping those of other kinds. With an IDPrefix, whatever the
	// database's collation, a state's walk stops after its newest few
	// thousand jobs (20 pages' worth for a large Limit); when fewer than a
	// page of those have the prefix, its jobs with the prefix are read from
	// an index by ID instead, at a cost that grows with their number (not
	// with the state's); the leased state's always are: a walk of
	// leaserouter_jobs_leased_seq in seq order, each entry's ID compared
	// in the index, stopping after a page of hits (at most the leases in
	// flight read, index only).
	return list[T](ctx, r, p)
}

// ListJSON is List with each job's payload as JSON (json.RawMessage),
// the bytes of the payload column as they are, never decoded into T: a
// Router of any T lists its queue for the console this way, a job of
// any kind with its payload (List leaves another kind's zero), and a job
// whose payload would not decode into T is listed all the same. Its
// filters, paging, cursors, cost and errors are List's (a cursor of one
// is valid in the other).
func (r *Router[T]) ListJSON(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[json.RawMessage], error) {
	return list[json.RawMessage](ctx, r, p)
}

// list is List with payloads of type P (T, or json.RawMessage: the
// column as it is, see decode).
func list[P, T any](ctx context.Context, r *Router[T], p leaserouter.ListParams) (leaserouter.JobPage[P], error) {
	ctx = orBackground(ctx)
	var page leaserouter.JobPage[P]
	mask, limit, err := listFilter(p)
	if err != nil {
		return page, err
	}
	kindKey, err := contract.ListKinds(leaserouter.ErrInvalidOptions, p.Kinds)
	if err != nil {
		return page, err
	}
	before := int64(firstPage)
	if p.Cursor != "" {
		// The queue is in the cursor's fingerprint: the queues share one
		// sequence of enqueue orders, so another queue's cursor would read
		// as a valid position here and select the wrong jobs (or none).
		seq, err := listcursor.DecodeIn(r.opts.Queue, p.Cursor, mask, p.IDPrefix+kindKey)
		if err == nil && seq > math.MaxInt64 {
			err = listcursor.ErrMalformed
		}
		if errors.Is(err, listcursor.ErrOtherFilters) {
			return page, fmt.Errorf("%w: ListParams.Cursor: %w or on another queue than %s", leaserouter.ErrInvalidOptions, err,
				contract.Quote(r.opts.Queue))
		}
		if err != nil {
			return page, fmt.Errorf("%w: ListParams.Cursor: %w", leaserouter.ErrInvalidOptions, err)
		}
		before = int64(seq)
	}
	if !utf8.ValidString(p.IDPrefix) {
		return page, fmt.Errorf("%w: ListParams.IDPrefix is not valid UTF-8", leaserouter.ErrInvalidOptions)
	}
	if strings.IndexByte(p.IDPrefix, 0) >= 0 {
		return page, nil // no ID holds a NUL (ValidateID)
	}
	b := &pgx.Batch{}
	r.queueSettle(b)
	a := args{"queue": r.opts.Queue, "before": before, "states": stateNames(mask), "omit": p.OmitPayload,
		"limit": limit + 1} // one more than the page: there is a next one
	switch {
	case kindKey != "":
		kinds := slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(p.Kinds))), func(k string) bool { return k == "" })
		a["kinds"], a["unkinded"], a["prefix"] = kinds, slices.Contains(p.Kinds, ""), p.IDPrefix
		b.Queue(r.st.listJobsKinds, a)
	case p.IDPrefix == "":
		b.Queue(r.st.listJobs, a)
	default:
		a["prefix"], a["end"], a["walk"] = p.IDPrefix, prefixEnd(p.IDPrefix), prefixWalk(limit+1)
		b.Queue(r.st.listJobsPrefix, a)
	}
	res := r.db.SendBatch(ctx, b)
	settled, err := readSettle(res)
	var last int64 // the seq of the page's last job
	if err == nil {
		last, err = readPage(res, limit, r.opts.kinds, &page)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return leaserouter.JobPage[P]{}, errWrap("List", err)
	}
	r.settled(ctx, settled)
	if len(page.Jobs) > limit {
		page.Jobs = page.Jobs[:limit]
		page.NextCursor = listcursor.EncodeIn(r.opts.Queue, uint64(last), mask, p.IDPrefix+kindKey)
	}
	return page, nil
}

// prefixEnd is the least string above every ID that starts with prefix
// (valid UTF-8, not empty), in byte order, the order of collation "C":
// prefix with its last code point that has a next one raised to it and
// the maximal ones after it dropped (byte order is code point order in
// UTF-8; the surrogates, which no text holds, skipped). A prefix of
// maximal code points only has no such string: every string above it
// starts with it, so the end is then one above every valid ID (a run of
// maximal code points longer than leaserouter.MaxIDBytes).
func prefixEnd(prefix string) string {
	runes := []rune(prefix)
	for i := len(runes) - 1; i >= 0; i-- {
		if next := runes[i] + 1; next <= utf8.MaxRune {
			if next == 0xD800 { // the surrogates: U+D800 to U+DFFF
				next = 0xE000
			}
			return string(runes[:i]) + string(next)
		}
	}
	return strings.Repeat(string(utf8.MaxRune), leaserouter.MaxIDBytes/utf8.UTFMax+1)
}

// prefixWalk is how many of a state's newest jobs a page of page jobs
// with an ID prefix walks before it looks the prefix up in the index
// by ID instead (jobs_list_prefix.sql): a prefix that more than one job
// in twenty has among them is found by the walk (at most about a page
// read per state when most have it), a rarer one by the index
// (leaserouter_jobs_id_unleased, index only; the leased state's from
// leaserouter_jobs_leased_seq, its IDs compared in the index).
func prefixWalk(page int) int { return max(2000, 20*page) }

// stateNames are the enum labels (dbState) of the states of mask (bit
// s: State s).
func stateNames(mask uint8) []string {
	var names []string
	for s := leaserouter.StatePending; s <= leaserouter.StateCanceled; s++ {
		if mask&(1<<s) != 0 {
			names = append(names, dbState(s))
		}
	}
	return names
}

// readPage reads up to limit+1 jobs of jobs_list into page, and returns
// the seq of the limit-th (the page's last, when there is a next one).
func readPage[T any](res pgx.BatchResults, limit int, kinds []string, page *leaserouter.JobPage[T]) (int64, error) {
	rows, err := res.Query()
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var last int64
	for rows.Next() {
		var jr jobRow
		var seq int64
		if err := rows.Scan(append(jr.fields(), &seq)...); err != nil {
			return 0, err
		}
		j, err := jobOf[T](&jr, kinds)
		if err != nil {
			return 0, err
		}
		page.Jobs = append(page.Jobs, j)
		if len(page.Jobs) == limit {
			last = seq
		}
	}
	return last, rows.Err()
}

// listFilter checks p (contract.ListFilter) and returns its states as a
// mask (bit s: State s; every state if none) and its page size.
func listFilter(p leaserouter.ListParams) (mask uint8, limit int, err error) {
	return contract.ListFilter(leaserouter.ErrInvalidOptions, p.States, p.Limit, leaserouter.StateCanceled+1)
}

// Retry makes a finished job (succeeded, dead or canceled) pending again
// at once, in its place in the enqueue order, with a fresh attempt
// budget: its next lease is attempt 1 of its MaxAttempts, with a token
// above every one issued before (the token sequence). Its LastError,
// Errors (the new attempts' records follow) and last checkpoint
// (Progress) stay. It settles what is due first, as Get
// does, and wakes the queue's waiting Acquires in every process (a
// notification, sent if the change commits). It emits
// leaserouter.EventRetried (Attempt 0, Token: the job's latest lease's),
// counted in this Router's Stats.Retried. It returns an error wrapping
// ErrNotFinished for a pending, scheduled or leased job, ErrNotFound for
// an unknown id or a finished job past its Retention (for an id
// leaserouter.ValidateID refuses, "" included, one wrapping both
// ErrInvalidJob and ErrNotFound, without a round trip), ErrClosed after
// Close, or one wrapping the driver's; in each case nothing changed,
// unless the outcome is unknown (the connection failed after the commit
// was sent: Get tells). One round trip, one transaction (RetryMany's, for
// one job); it waits for the job's row while another transaction holds
// it (a CompleteTx's: until its caller's transaction ends). Safe for
// concurrent use.
func (r *Router[T]) Retry(ctx context.Context, id string) error {
	j, err := r.oneJob(ctx, "Retry", id, r.retry)
	if err == nil && !j.done {
		return fmt.Errorf("%w: %q is %s", leaserouter.ErrNotFinished, id, j.was)
	}
	return err
}

// Delete removes a job that is not leased (pending, scheduled or
// finished): its row is deleted, so its ID may be enqueued again at once.
// It settles what is due first, as Get does (a lease past its expiry is
// no longer leased). It emits leaserouter.EventPurged (Time: the
// database's clock at the delete), counted in this Router's
// Stats.Purged. It returns an error wrapping ErrLeased for a leased job,
// naming its lease's fencing token and holder (Cancel it first),
// ErrNotFound for an unknown id or a finished job past its Retention
// (for an id leaserouter.ValidateID refuses, "" included, one wrapping
// both ErrInvalidJob and ErrNotFound, without a round trip),
// ErrClosed after Close, or one wrapping the driver's; in each case
// nothing changed, unless the outcome is unknown (the connection failed
// after the commit was sent: Get tells). One round trip, one transaction
// (DeleteMany's, for one job); it waits for the job's row while another
// transaction holds it (a CompleteTx's: until its caller's transaction
// ends). Safe for concurrent use.
func (r *Router[T]) Delete(ctx context.Context, id string) error {
	j, err := r.oneJob(ctx, "Delete", id, r.delete)
	if err == nil && !j.done { // every state asked for: only a leased job stays
		return contract.DeleteLeased(leaserouter.ErrLeased, id, uint64(j.token), j.owner)
	}
	return err
}

// Pause stops the granting of leases of the Router's queue, in every
// process sharing it, until Resume (from any process): the pause is a row
// of the table leaserouter_queues, which the claim statement reads.
// Acquire and AcquireMany wait, TryAcquire and TryAcquireMany return
// ErrNoJob, Run's workers idle; a claim already running when Pause
// commits may still grant. Everything else goes on: enqueues, heartbeats,
// completions, failures, expiries, settling and purges. Stats.Paused and
// Queues say so. Pausing a paused queue changes nothing. It returns
// ErrClosed after Close, or an error wrapping the driver's. One round
// trip. Safe for concurrent use.
func (r *Router[T]) Pause(ctx context.Context) error {
	return r.setPaused(orBackground(ctx), "Pause", true)
}

// Resume undoes Pause, for every process sharing the queue: leases are
// granted again, and waiting Acquires in every process are woken at once
// (a notification, sent if the change commits), not at their next poll.
// Resuming a queue that is not paused changes nothing (waiters are woken
// all the same). It returns ErrClosed after Close, or an error wrapping
// the driver's. One round trip. Safe for concurrent use.
func (r *Router[T]) Resume(ctx context.Context) error {
	return r.setPaused(orBackground(ctx), "Resume", false)
}

func (r *Router[T]) setPaused(ctx context.Context, call string, paused bool) error {
	if err := r.open(); err != nil {
		return err
	}
	_, err := r.db.Exec(ctx, r.st.pauseQueue, args{"queue": r.opts.Queue, "paused": paused, "channel": r.channel})
	return errWrap(call, err)
}

// QueueInfo is one queue of the database, as Queues returns it: its jobs
// counted by state (finished ones while retained) and whether it is
// paused (Router.Pause).
type QueueInfo struct {
	Name string // Options.Queue of the Routers on it

	// Jobs by state, as Stats counts them (Dead: Stats.DeadJobs).
	Pending, Scheduled, Leased, Succeeded, Dead, Canceled int
	// Failed is Dead under its former name, filled with the same value
	// for one release.
	//
	// Deprecated: use Dead. "Failed" names one failed attempt
	// (leaserouter.EventFailed); a job with no attempts left is dead.
	Failed int

	Paused bool // no lease is granted until Resume

	// Estimated: some of the counts are estimates, as in Stats (a state
	// with more than 20,000 jobs); never from ExactQueues.
	Estimated bool
}

// Queues returns the database's queues, by name: every queue with jobs
// in the jobs table (finished ones while retained) or paused or resumed
// once, whatever Router made them, each with its counts by state and
// whether it is paused. Each queue is counted as Stats counts one: a
// state with at most 20,000 jobs exactly, a larger one estimated from
// the planner's statistics, with QueueInfo.Estimated true (ExactQueues
// counts every job). It counts what it reads at that moment, without
// settling (a lease past its expiry still counts as leased until some
// process settles it). One round trip; its time grows with the number of
// queues (about a Stats each: a probe of the primary key finds the next
// queue), not with their jobs. It works after Close. Errors wrap the
// driver's. Safe for concurrent use.
func (r *Router[T]) Queues(ctx context.Context) ([]QueueInfo, error) {
	return r.queues(orBackground(ctx), "Queues", &r.cap)
}

// readQueues reads the results of Queues' batch, sorted by name.
func readQueues(res pgx.BatchResults) ([]QueueInfo, error) {
	byName := map[string]*QueueInfo{}
	info := func(name string) *QueueInfo {
		q := byName[name]
		if q == nil {
			q = &QueueInfo{Name: name}
			byName[name] = q
		}
		return q
	}
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name, state string
		var n int64
		var est bool
		if err := rows.Scan(&name, &state, &n, &est); err != nil {
			rows.Close()
			return nil, err
		}
		q := info(name)
		if st, ok := stateNamed(state); ok {
			*[...]*int{&q.Pending, &q.Scheduled, &q.Leased, &q.Succeeded, &q.Dead, &q.Canceled}[st] = int(max(n, 0))
			q.Failed = q.Dead
		}
		q.Estimated = q.Estimated || est
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = res.Query()
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name string
		var paused bool
		if err := rows.Scan(&name, &paused); err != nil {
			rows.Close()
			return nil, err
		}
		info(name).Paused = paused
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]QueueInfo, 0, len(byName))
	for _, q := range byName {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// oneJob is an operation on job id alone (Cancel, Retry, Delete): op,
// the bulk calls' statement (cancel, retry, delete), run on id in every
// state. It returns what op did to the job; for an ID
// leaserouter.ValidateID refuses, the error of every backend
// (contract.CheckJobID: wrapping both ErrInvalidJob and ErrNotFound),
// without a round trip; ErrClosed after Close; an error wrapping
// ErrNotFound for a job the queue does not know; or op's error. A nil
// ctx means context.Background().
func (r *Router[T]) oneJob(ctx context.Context, call, id string,
	op func(ctx context.Context, call string, ids, states []string) ([]acted, error)) (acted, error) {
	if err := contract.CheckJobID(leaserouter.ErrInvalidJob, leaserouter.ErrNotFound, id); err != nil {
		return acted{}, err
	}
	if err := r.open(); err != nil {
		return acted{}, err
	}
	jobs, err := op(orBackground(ctx), call, []string{id}, everyState)
	switch {
	case err != nil:
		return acted{}, err
	case len(jobs) == 0:
		return acted{}, fmt.Errorf("%w: %q", leaserouter.ErrNotFound, id)
	}
	return jobs[0], nil
}

// Queue returns the name of the Router's queue (Options.Queue).
func (r *Router[T]) Queue() string { return r.opts.Queue }

// Leases returns up to limit leased jobs of the Router's queue, the lease
// expiring soonest first (the console's leases page), after settling what
// is due: holder (Owner), fencing token, LeaseExpiry (the database's
// clock) and UpdatedAt, the instant of the lease's grant or last accepted
// heartbeat. The jobs carry a zero Payload, a nil Progress and nil
// Errors (none of those columns is read, so the call costs the same whatever their size; Get
// returns a job whole). limit 0 means leaserouter.DefaultListLimit; below
// 0 or above leaserouter.MaxListLimit is an error wrapping
// ErrInvalidOptions, without a round trip. One round trip, a walk of the
// index of leased jobs by expiry. It works after Close. Errors wrap the
// driver's. Safe for concurrent use.
func (r *Router[T]) Leases(ctx context.Context, limit int) ([]leaserouter.Job[T], error) {
	return leases[T](ctx, r, limit)
}

// LeasesJSON is Leases with the jobs' payload type json.RawMessage: the same jobs,
// without payload, as json.RawMessage jobs; its cost and errors are
// Leases'.
func (r *Router[T]) LeasesJSON(ctx context.Context, limit int) ([]leaserouter.Job[json.RawMessage], error) {
	return leases[json.RawMessage](ctx, r, limit)
}

// leases is Leases with jobs of payload type P (none is read).
func leases[P, T any](ctx context.Context, r *Router[T], limit int) ([]leaserouter.Job[P], error) {
	ctx = orBackground(ctx)
	limit, err := contract.LeasesLimit(leaserouter.ErrInvalidOptions, limit)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	r.queueSettle(b)
	b.Queue(r.st.listLeases, args{"queue": r.opts.Queue, "limit": limit})
	res := r.db.SendBatch(ctx, b)
	settled, err := readSettle(res)
	var out []leaserouter.Job[P]
	if err == nil {
		out, err = readJobs[P](res, r.opts.kinds)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, errWrap("Leases", err)
	}
	r.settled(ctx, settled)
	return out, nil
}

// readJobs reads rows of a job's columns (as job_get has them).
func readJobs[T any](res pgx.BatchResults, kinds []string) ([]leaserouter.Job[T], error) {
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []leaserouter.Job[T]
	for rows.Next() {
		var jr jobRow
		if err := rows.Scan(jr.fields()...); err != nil {
			return nil, err
		}
		j, err := jobOf[T](&jr, kinds)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}
