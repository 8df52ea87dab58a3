package routertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// The operator's side: List, Retry,
// Delete, Pause and Resume, a row per rule, on every backend.

// Admin is the operator's side of a Backend. Every backend implements it
// (the suite's own fake, which proves the suite, does not: its rows are
// not run there).
type Admin interface {
	List(ctx context.Context, p leaserouter.ListParams) (leaserouter.JobPage[string], error)
	Retry(ctx context.Context, id string) error
	RunNow(ctx context.Context, id string) error
	Delete(ctx context.Context, id string) error
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	Leases(ctx context.Context, limit int) ([]leaserouter.Job[string], error)
	LeasePage(ctx context.Context, p leaserouter.LeasesParams) (leaserouter.JobPage[string], error)
	History(ctx context.Context) ([]leaserouter.Minute, error)
	// The bulk actions (bulk_rows.go).
	RetryMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error)
	CancelMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error)
	DeleteMany(ctx context.Context, ids []string, states []leaserouter.State) (leaserouter.BulkResult, error)
}

func adminRows() []Row {
	return append([]Row{rowListPages, rowListBadInput, rowRetry, rowRunNow, rowReadySince, rowLeasedAt, rowLeasePages, rowDelete, rowPause, rowAdminAfterClose, rowAdminSettles,
		rowLeasesOrder, rowHistory, rowHistoryMinutes, rowPagesOmitPayload, rowListPrefixIsLiteral, rowDeleteLeasedText}, bulkRows()...)
}

// admin returns b's Admin, failing t if it has none.
func admin(t T, b Backend) Admin {
	t.Helper()
	return offers[Admin](t, b, "admin calls (List, Retry, Delete, Pause, Resume)")
}

// listAll follows NextCursor from the first page of p to the last and
// returns the IDs, in order; between pages it calls between (nil: none).
func listAll(t T, a Admin, p leaserouter.ListParams, between func(page int)) []string {
	t.Helper()
	var ids []string
	for page := 0; ; page++ {
		res, err := a.List(ctxOf(t), p)
		require.NoError(t, err)
		limit := p.Limit
		if limit == 0 {
			limit = leaserouter.DefaultListLimit
		}
		require.LessOrEqual(t, len(res.Jobs), limit, "a page holds at most Limit jobs")
		for _, j := range res.Jobs {
			ids = append(ids, j.ID)
		}
		if res.NextCursor == "" {
			return ids
		}
		require.NotEmpty(t, res.Jobs, "a page with a next cursor has jobs")
		p.Cursor = res.NextCursor
		if between != nil {
			between(page)
		}
	}
}

// rowListPages: List pages newest first (enqueue order) by keyset: a
// filter by states and ID prefix selects, NextCursor is "" on the last
// page, and following the cursors never skips or repeats a job that stays
// selected while jobs are enqueued, leased and completed in between; a
// cursor stays valid when Limit changes.
var rowListPages = Row{Name: "admin/List pages newest first, keyset: nothing skipped or repeated", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	var want []string // newest first
	for i := range 25 {
		id := fmt.Sprintf("a%02d", i)
		require.NoError(t, b.Enqueue(ctx, id, "p"+id))
		want = append([]string{id}, want...)
	}
	first, err := a.List(ctx, leaserouter.ListParams{Limit: 3})
	require.NoError(t, err)
	require.Len(t, first.Jobs, 3)
	require.Equal(t, "a24", first.Jobs[0].ID)
	require.Equal(t, "pa24", first.Jobs[0].Payload, "a page holds the jobs as Get returns them")
	require.Equal(t, leaserouter.StatePending, first.Jobs[0].State)

	// Every job, a page of 4 at a time; between pages, jobs are enqueued
	// (newer than the cursor: not on the later pages), leased and
	// completed (still selected: no state filter).
	n := 0
	got := listAll(t, a, leaserouter.ListParams{Limit: 4}, func(int) {
		n++
		require.NoError(t, b.Enqueue(ctx, fmt.Sprintf("new%02d", n), ""))
		l := tryAcquire(t, b, "w")
		require.NoError(t, l.Complete(ctx))
	})
	require.Equal(t, want, got, "every job once, newest first, while others changed")

	// A filter: the succeeded jobs whose ID starts with "a".
	var done []string
	for _, id := range want {
		if get(t, b, id).State == leaserouter.StateSucceeded {
			done = append(done, id)
		}
	}
	require.NotEmpty(t, done)
	p := leaserouter.ListParams{States: []leaserouter.State{leaserouter.StateSucceeded}, IDPrefix: "a", Limit: 2}
	require.Equal(t, done, listAll(t, a, p, nil))

	// Limit may change between pages; the filters may not.
	res, err := a.List(ctx, p)
	require.NoError(t, err)
	p.Cursor, p.Limit = res.NextCursor, 0 // 0: the default page, all the rest here
	rest, err := a.List(ctx, p)
	require.NoError(t, err)
	require.Len(t, rest.Jobs, len(done)-2)
	require.Empty(t, rest.NextCursor, "the last page")
	p.Limit, p.IDPrefix = 2, "new"
	_, err = a.List(ctx, p)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "a cursor made under other filters")

	// Nothing selected: one empty page.
	res, err = a.List(ctx, leaserouter.ListParams{IDPrefix: "zz"})
	require.NoError(t, err)
	require.Empty(t, res.Jobs)
	require.Empty(t, res.NextCursor)
}}

// rowListBadInput: a bad state, a Limit below 0 or above 1000, and a
// malformed cursor are errors wrapping ErrInvalidOptions.
var rowListBadInput = Row{Name: "admin/List refuses a bad state, limit or cursor", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	for _, p := range []leaserouter.ListParams{
		{States: []leaserouter.State{leaserouter.StatePending, 6}},
		{Limit: -1},
		{Limit: leaserouter.MaxListLimit + 1},
		{Cursor: "not a cursor"},
		{Cursor: "AAAAAAAAAAAAAAAAAAAAAAA"},
	} {
		_, err := a.List(ctx, p)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "%+v", p)
	}
	res, err := a.List(ctx, leaserouter.ListParams{Limit: leaserouter.MaxListLimit})
	require.NoError(t, err, "the largest page")
	require.Len(t, res.Jobs, 1)
}}

// rowRetry: Retry makes a dead, canceled or succeeded job pending now
// with a fresh attempt budget (its next lease is attempt 1, with a token
// above every earlier one), keeps LastError and its place in the order,
// emits retried (Stats.Retried); an unfinished job is refused with
// ErrNotFinished, an unknown one with ErrNotFound, nothing changed.
var rowRetry = Row{Name: "admin/Retry a finished job: pending, fresh attempts, LastError and place kept", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{MaxAttempts: 1, OnEvent: ev.record})
	a := admin(t, b)
	ctx := ctxOf(t)
	for _, id := range []string{"dead", "done", "canceled", "leased"} {
		require.NoError(t, b.Enqueue(ctx, id, id))
	}
	stale := tryAcquire(t, b, "w")
	require.Equal(t, "dead", stale.JobID())
	require.NoError(t, stale.Fail(ctx, errBoom))
	require.Equal(t, leaserouter.StateDead, get(t, b, "dead").State)
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, b.Cancel(ctx, "canceled"))
	leased := tryAcquire(t, b, "w")
	require.Equal(t, "leased", leased.JobID())
	require.NoError(t, b.Enqueue(ctx, "pending", ""))

	for _, id := range []string{"pending", "leased"} {
		before := get(t, b, id)
		require.ErrorIs(t, a.Retry(ctx, id), leaserouter.ErrNotFinished, id)
		require.Equal(t, before, get(t, b, id), "%s: nothing changed", id)
	}
	require.ErrorIs(t, a.Retry(ctx, "unknown"), leaserouter.ErrNotFound)

	orderBefore := listAll(t, a, leaserouter.ListParams{}, nil)
	top := leased.Token()
	for _, id := range []string{"dead", "done", "canceled"} {
		require.NoError(t, a.Retry(ctx, id), id)
		j := get(t, b, id)
		require.Equal(t, leaserouter.StatePending, j.State, id)
		require.Zero(t, j.Attempt, "%s: a fresh attempt budget", id)
		require.Empty(t, j.Owner)
	}
	require.Equal(t, "boom", get(t, b, "dead").LastError, "LastError kept")
	require.Equal(t, orderBefore, listAll(t, a, leaserouter.ListParams{}, nil), "Retry keeps a job's place in the order")

	// The retried jobs lease again (after "pending", ready before them),
	// attempt 1 of 1, tokens above all.
	for range 4 {
		l := tryAcquire(t, b, "w")
		require.Equal(t, 1, l.Attempt(), l.JobID())
		require.Greater(t, l.Token(), top)
		top = l.Token()
		require.NoError(t, l.Complete(ctx))
	}
	require.ErrorIs(t, stale.Complete(ctx), leaserouter.ErrLeaseLost, "a lease from before the Retry stays lost")
	s := stats(t, b)
	require.EqualValues(t, 3, s.Retried)
	require.NoError(t, b.Close(ctx))
	evs := ev.drain()
	require.Equal(t, 1, countKind(evs, "dead", leaserouter.EventRetried))
	r := first(evs, "canceled", leaserouter.EventRetried)
	require.Zero(t, r.Attempt, "the retried event carries the fresh attempt count")
}}

func countKind(evs []leaserouter.Event, id string, k leaserouter.EventKind) int {
	n := 0
	for _, e := range evs {
		if e.JobID == id && e.Kind == k {
			n++
		}
	}
	return n
}

// rowDelete: Delete removes a pending, scheduled or finished job and its
// dedup record (its ID can be enqueued again), emits purged (counted in
// Stats.Purged); a leased job is refused with ErrLeased and an unknown
// one with ErrNotFound, nothing changed.
var rowDelete = Row{Name: "admin/Delete a job not leased, with its dedup record; a leased one refused", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{OnEvent: ev.record})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "done", ""))
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, b.Enqueue(ctx, "leased", ""))
	l := tryAcquire(t, b, "w")
	require.NoError(t, b.Enqueue(ctx, "pending", ""))
	require.NoError(t, b.Enqueue(ctx, "scheduled", "", leaserouter.WithDelay(h.Lease()*100)))
	require.NoError(t, b.Enqueue(ctx, "canceled", ""))
	require.NoError(t, b.Cancel(ctx, "canceled"))

	before := get(t, b, "leased")
	require.ErrorIs(t, a.Delete(ctx, "leased"), leaserouter.ErrLeased)
	require.Equal(t, before, get(t, b, "leased"), "nothing changed")
	require.NoError(t, l.Heartbeat(ctx, nil), "the lease stays valid")
	require.ErrorIs(t, a.Delete(ctx, "unknown"), leaserouter.ErrNotFound)

	for _, id := range []string{"done", "pending", "scheduled", "canceled"} {
		require.NoError(t, a.Delete(ctx, id), id)
		_, ok, err := b.Get(ctx, id)
		require.NoError(t, err)
		require.False(t, ok, "%s: gone", id)
		require.ErrorIs(t, a.Delete(ctx, id), leaserouter.ErrNotFound, "%s: deleted twice", id)
		require.NoError(t, b.Enqueue(ctx, id, "again"), "%s: its ID may be enqueued again", id)
	}
	s := stats(t, b)
	require.EqualValues(t, 4, s.Purged)
	require.Equal(t, 4, s.Pending, "the four enqueued again")
	require.Equal(t, 1, s.Leased)
	require.Zero(t, s.Succeeded+s.Canceled+s.Scheduled)
	require.NoError(t, l.Complete(ctx))
	require.NoError(t, b.Close(ctx))
	evs := ev.drain()
	for _, id := range []string{"done", "pending", "scheduled", "canceled"} {
		require.Equal(t, 1, countKind(evs, id, leaserouter.EventPurged), id)
	}
}}

// rowPause: Pause stops grants (TryAcquire: ErrNoJob; Acquire waits; Run
// idles) while enqueues, heartbeats and completions go on, and Stats says
// so; Pause and Resume are idempotent, and Resume wakes a waiting Acquire.
var rowPause = Row{Name: "admin/Pause stops grants only; Resume wakes a waiting Acquire", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	l := tryAcquire(t, b, "w")
	require.NoError(t, a.Pause(ctx))
	require.NoError(t, a.Pause(ctx), "twice")
	require.True(t, stats(t, b).Paused)
	require.NoError(t, b.Enqueue(ctx, "b", ""), "enqueues go on")
	_, err := b.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "no grant while paused")
	_, err = b.TryAcquireMany(ctx, "w", 5)
	require.ErrorIs(t, err, leaserouter.ErrNoJob)
	require.NoError(t, l.Heartbeat(ctx, nil), "heartbeats go on")
	require.NoError(t, l.Complete(ctx), "completions go on")

	got := make(chan Lease, 1)
	ran := make(chan string, 1)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() {
		if l, err := b.Acquire(runCtx, "waiter"); err == nil {
			got <- l
		}
	})
	wg.Go(func() {
		_ = b.Run(runCtx, leaserouter.WorkerOptions{Workers: 1}, func(_ context.Context, l Lease) error {
			ran <- l.JobID()
			return nil
		})
	})
	h.Advance(h.Lease() / 2)
	notYet(t, got, "Acquire returned while paused")
	notYet(t, ran, "Run ran a job while paused")
	require.Equal(t, leaserouter.StatePending, get(t, b, "b").State)

	require.NoError(t, a.Resume(ctx))
	require.NoError(t, a.Resume(ctx), "twice")
	require.False(t, stats(t, b).Paused)
	var id string
	eventually(t, h, "the waiting Acquire or Run takes b once resumed", func() bool {
		select {
		case l := <-got:
			id = l.JobID()
			require.NoError(t, l.Complete(ctx))
		case id = <-ran:
		default:
		}
		return id != ""
	})
	require.Equal(t, "b", id)
}}

// rowAdminAfterClose: after Close, List and LeasePage still answer;
// Retry, Delete, RunNow, Pause and Resume return ErrClosed, nothing
// changed.
var rowAdminAfterClose = Row{Name: "admin/after Close: List answers, the actions return ErrClosed", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "done", ""))
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, b.Enqueue(ctx, "pending", ""))
	require.NoError(t, b.Close(ctx))
	res, err := a.List(ctx, leaserouter.ListParams{})
	require.NoError(t, err)
	require.Equal(t, []string{"pending", "done"}, ids(res.Jobs))
	leases, err := a.LeasePage(ctx, leaserouter.LeasesParams{})
	require.NoError(t, err, "LeasePage answers too")
	require.Empty(t, leases.Jobs)
	for what, err := range map[string]error{
		"Retry": a.Retry(ctx, "done"), "Delete": a.Delete(ctx, "pending"), "RunNow": a.RunNow(ctx, "pending"),
		"Pause": a.Pause(ctx), "Resume": a.Resume(ctx),
	} {
		require.ErrorIs(t, err, leaserouter.ErrClosed, what)
	}
	require.Equal(t, leaserouter.StateSucceeded, get(t, b, "done").State)
	require.Equal(t, leaserouter.StatePending, get(t, b, "pending").State)
	require.False(t, stats(t, b).Paused)
}}

func ids(jobs []leaserouter.Job[string]) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// rowAdminSettles: the admin calls see what Get sees: a lease past its
// expiry is listed as the expiry left it, and a finished job past its
// Retention is gone (not listed; Retry and Delete: ErrNotFound).
var rowAdminSettles = Row{Name: "admin/calls settle first: an expired lease listed as expired, a job past retention gone", Test: func(t T, h Harness) {
	d := h.Lease()
	b := open(t, h, Config{Retention: d, MaxAttempts: 1})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "old", ""))
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, b.Enqueue(ctx, "held", ""))
	l := tryAcquire(t, b, "w")
	expire(h, l, d)
	res, err := a.List(ctx, leaserouter.ListParams{States: []leaserouter.State{leaserouter.StateDead}})
	require.NoError(t, err)
	require.Equal(t, []string{"held"}, ids(res.Jobs), "the expired lease's job, dead (one attempt)")
	eventually(t, h, "the finished job past its retention gone", func() bool {
		res, err := a.List(ctx, leaserouter.ListParams{IDPrefix: "old"})
		require.NoError(t, err)
		return len(res.Jobs) == 0
	})
	for _, err := range []error{a.Retry(ctx, "old"), a.Delete(ctx, "old")} {
		require.True(t, errors.Is(err, leaserouter.ErrNotFound), "%v", err)
	}
	require.Equal(t, leaserouter.StateDead, get(t, b, "held").State)
}}

// rowLeasesOrder: Leases lists the leased jobs, the lease expiring
// soonest first (a heartbeat moves one back), at most limit, with holder,
// token and expiry; a bad limit is refused.
var rowLeasesOrder = Row{Name: "admin/Leases expiring soonest first", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	for _, id := range []string{"a", "b", "c", "d"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	var ls []Lease
	for range 3 {
		ls = append(ls, tryAcquire(t, b, "w"))
		h.Advance(h.Lease() / 100)
	}
	require.NoError(t, ls[0].Heartbeat(ctx, nil)) // now the latest expiry
	got, err := a.Leases(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{ls[1].JobID(), ls[2].JobID(), ls[0].JobID()}, ids(got))
	require.Equal(t, ls[1].Token(), got[0].Token)
	require.Equal(t, "w", got[0].Owner)
	require.Equal(t, leaserouter.StateLeased, got[0].State)
	require.True(t, ls[1].Expiry().Equal(got[0].LeaseExpiry), "the lease's expiry %v, listed as %v", ls[1].Expiry(), got[0].LeaseExpiry)
	got, err = a.Leases(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, []string{ls[1].JobID(), ls[2].JobID()}, ids(got), "the first limit of them")
	for _, bad := range []int{-1, leaserouter.MaxListLimit + 1} {
		_, err = a.Leases(ctx, bad)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	}
}}

// rowPagesOmitPayload: List with OmitPayload and Leases return jobs
// with a zero Payload and a nil Progress (whatever their size: a page
// reads neither), every other field as Get has it, while Get (and List
// without OmitPayload) returns them whole; a cursor stays valid whether
// or not OmitPayload changes between pages.
var rowPagesOmitPayload = Row{Name: "admin/List with OmitPayload and Leases carry no payload or checkpoint; Get does", Test: func(t T, h Harness) {
	// A lease that outlasts the row on a busy machine: it is held
	// without heartbeats while the pages are read.
	b := open(t, h, Config{LeaseDuration: time.Hour})
	a := admin(t, b)
	ctx := ctxOf(t)
	big := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }
	payload := string(big('p', 256<<10))
	for _, id := range []string{"released", "leased", "pending"} {
		require.NoError(t, b.Enqueue(ctx, id, payload+id))
	}
	l := tryAcquire(t, b, "w")
	require.Equal(t, "released", l.JobID())
	held := tryAcquire(t, b, "w")
	require.Equal(t, "leased", held.JobID())
	require.NoError(t, l.Heartbeat(ctx, big('c', 256<<10)))
	require.NoError(t, l.Release(ctx)) // pending again, its checkpoint kept
	require.NoError(t, held.Heartbeat(ctx, big('k', 256<<10)))

	whole := map[string]leaserouter.Job[string]{}
	for _, id := range []string{"released", "leased", "pending"} {
		j := get(t, b, id)
		require.Equal(t, payload+id, j.Payload, "Get returns the payload")
		whole[id] = j
	}
	require.Equal(t, big('c', 256<<10), whole["released"].Progress, "Get returns the checkpoint")
	require.Equal(t, big('k', 256<<10), whole["leased"].Progress)
	summary := func(id string) leaserouter.Job[string] {
		j := whole[id]
		j.Payload, j.Progress = "", nil
		return j
	}

	res, err := a.List(ctx, leaserouter.ListParams{OmitPayload: true})
	require.NoError(t, err)
	require.Equal(t, []string{"pending", "leased", "released"}, ids(res.Jobs))
	for _, j := range res.Jobs {
		require.Zero(t, len(j.Payload), "%s: List with OmitPayload: no payload", j.ID)
		require.Zero(t, len(j.Progress), "%s: List with OmitPayload: no checkpoint", j.ID)
		require.Equal(t, summary(j.ID), j, "%s: List with OmitPayload: the rest as Get", j.ID)
	}
	res, err = a.List(ctx, leaserouter.ListParams{})
	require.NoError(t, err)
	for _, j := range res.Jobs {
		require.Equal(t, whole[j.ID], j, "%s: List without OmitPayload: the job whole", j.ID)
	}
	leases, err := a.Leases(ctx, 0)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	require.Zero(t, len(leases[0].Payload), "Leases: no payload")
	require.Zero(t, len(leases[0].Progress), "Leases: no checkpoint")
	require.Equal(t, []leaserouter.Job[string]{summary("leased")}, leases, "Leases: no payload, no checkpoint")

	// One cursor, whichever OmitPayload the pages have.
	p := leaserouter.ListParams{Limit: 1, OmitPayload: true}
	res, err = a.List(ctx, p)
	require.NoError(t, err)
	require.Equal(t, summary("pending"), res.Jobs[0])
	p.Cursor, p.OmitPayload = res.NextCursor, false
	res, err = a.List(ctx, p)
	require.NoError(t, err)
	require.Equal(t, whole["leased"], res.Jobs[0])
	p.Cursor, p.OmitPayload = res.NextCursor, true
	res, err = a.List(ctx, p)
	require.NoError(t, err)
	require.Equal(t, []leaserouter.Job[string]{summary("released")}, res.Jobs)
	require.Empty(t, res.NextCursor)
}}

// rowListPrefixIsLiteral: ListParams.IDPrefix selects the IDs that start
// with it byte for byte, whatever it holds: no pattern characters (%, _,
// \), code points above ASCII up to the highest (U+10FFFF, which has no
// next one), around the surrogates no string holds; "" selects every
// job; on every page, under every collation of the backend's.
var rowListPrefixIsLiteral = Row{Name: "admin/List's IDPrefix is a literal byte prefix", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	const top = "\U0010FFFF"
	all := []string{"a", "a%", "a%b", "ab", "a_", "a_b", "aXb", "a\\", "a\\b", "a\\\\", "b", "B", "é", "éa", "e",
		"\uD7FF", "\uD7FFx", "\uE000", top, top + "a", top + top, "a" + top, "a" + top + "z", "b" + top, "z", "~", "\u007F"}
	// Newer than those, more jobs than a backend may look through before
	// it looks a rare prefix up another way (pgrouter: an index by ID).
	var fill []leaserouter.JobSpec[string]
	for i := range 2100 {
		fill = append(fill, leaserouter.JobSpec[string]{ID: fmt.Sprintf("y%04d", i)})
	}
	var newestFirst []string
	for _, id := range all {
		require.NoError(t, b.Enqueue(ctx, id, ""))
		newestFirst = append([]string{id}, newestFirst...)
	}
	dup, err := b.EnqueueMany(ctx, fill)
	require.NoError(t, err)
	require.Empty(t, dup)
	for _, j := range fill {
		newestFirst = append([]string{j.ID}, newestFirst...)
	}
	for _, prefix := range []string{"", "y", "y1", "a", "a%", "a_", "a\\", "a\\\\", "%", "_", "\\", "A", "b", "é", "e", "\uD7FF",
		"\uE000", top, top + top, top + top + top, "a" + top, "a" + top + top, "~", "\u007F", "\u0080", "zz"} {
		var want []string
		for _, id := range newestFirst {
			if strings.HasPrefix(id, prefix) {
				want = append(want, id)
			}
		}
		limits := []int{0, 2}
		if len(want) > 100 {
			limits = []int{leaserouter.MaxListLimit}
		}
		for _, limit := range limits {
			got := listAll(t, a, leaserouter.ListParams{IDPrefix: prefix, Limit: limit, OmitPayload: true}, nil)
			require.Equal(t, want, got, "prefix %q (%+q), limit %d", prefix, prefix, limit)
			got = listAll(t, a, leaserouter.ListParams{IDPrefix: prefix, Limit: limit,
				States: []leaserouter.State{leaserouter.StatePending}}, nil)
			require.Equal(t, want, got, "prefix %q (%+q), limit %d, pending", prefix, prefix, limit)
		}
	}
}}

// rowHistory: History has HistoryMinutes consecutive minutes, the last
// the current one, and counts completions, failed attempts, deaths,
// expiries and stale refusals.
var rowHistory = Row{Name: "admin/History counts per minute", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 1})
	a := admin(t, b)
	ctx := ctxOf(t)
	for _, id := range []string{"a", "b", "c", "d"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, tryAcquire(t, b, "w").Fail(ctx, errBoom)) // one attempt: failed, dead
	l := tryAcquire(t, b, "w")
	require.NoError(t, b.Cancel(ctx, l.JobID()))
	require.ErrorIs(t, l.Complete(ctx), leaserouter.ErrLeaseLost)
	exp := tryAcquire(t, b, "w")
	expire(h, exp, h.Lease()) // one attempt: expired, dead
	require.Equal(t, leaserouter.StateDead, get(t, b, exp.JobID()).State)
	before := time.Now().UTC().Truncate(time.Minute)
	hist, err := a.History(ctx)
	require.NoError(t, err)
	after := time.Now().UTC().Truncate(time.Minute)
	require.Len(t, hist, leaserouter.HistoryMinutes)
	last := hist[len(hist)-1].Start
	require.True(t, last.Equal(before) || last.Equal(after), "the last minute %v is the current one (%v)", last, after)
	var sum leaserouter.Minute
	for i, m := range hist {
		if i > 0 {
			require.Equal(t, time.Minute, m.Start.Sub(hist[i-1].Start), "consecutive minutes")
		}
		sum.Completed += m.Completed
		sum.Failed += m.Failed
		sum.Dead += m.Dead
		sum.Expired += m.Expired
		sum.StaleRejected += m.StaleRejected
	}
	require.Equal(t, leaserouter.Minute{Completed: 1, Failed: 1, Dead: 2, Expired: 1, StaleRejected: 1}, sum)
}}

// rowHistoryMinutes: each count is in the minute it happened (an
// expiry's in the minute of its expiry instant), and an hour later no
// minute of History holds any.
var rowHistoryMinutes = Row{Name: "admin/History counts each in its minute, none after an hour", Needs: "ExactClock", Test: func(t T, h Harness) {
	b := open(t, h, Config{LeaseDuration: time.Minute, MaxAttempts: 1})
	a := admin(t, b)
	ctx := ctxOf(t)
	for _, id := range []string{"a", "b", "c", "d"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, tryAcquire(t, b, "w").Fail(ctx, nil)) // one attempt: failed, then dead
	h.Advance(2 * time.Minute)
	exp := tryAcquire(t, b, "w")
	h.Advance(time.Minute + time.Second) // expires, dead
	require.ErrorIs(t, exp.Complete(ctx), leaserouter.ErrLeaseLost)
	hist, err := a.History(ctx)
	require.NoError(t, err)
	first := hist[len(hist)-4] // the minute of the completions (3 minutes and a second ago)
	require.Equal(t, leaserouter.Minute{Start: first.Start, Completed: 2, Failed: 1, Dead: 1}, first)
	expired := hist[len(hist)-1]
	if expired.Expired == 0 { // the expiry instant fell in the minute before
		expired = hist[len(hist)-2]
	}
	require.Equal(t, 1, expired.Expired)
	require.Equal(t, 1, expired.Dead)
	h.Advance(time.Hour)
	hist, err = a.History(ctx)
	require.NoError(t, err)
	for _, m := range hist {
		require.Zero(t, m.Completed+m.Failed+m.Dead+m.Expired+m.StaleRejected, "an hour later: %+v", m)
	}
}}

// rowDeleteLeasedText: Delete's refusal of a leased job reads the same on
// every backend, naming the job, its lease's fencing token and its
// holder.
var rowDeleteLeasedText = Row{Name: "admin/Delete of a leased job is refused naming its token and holder, the same text on every backend", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "leased", ""))
	l := tryAcquire(t, b, "worker-7")
	err := a.Delete(ctx, "leased")
	require.ErrorIs(t, err, leaserouter.ErrLeased)
	require.EqualError(t, err, fmt.Sprintf(`leaserouter: job is leased: "leased" (token %d, held by "worker-7")`, l.Token()))
	require.NoError(t, l.Complete(ctx), "the lease stays valid")
	require.NoError(t, b.Close(ctx))
}}
