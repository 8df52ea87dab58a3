package routertest

import (
	"fmt"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// The bulk actions (RetryMany, CancelMany, DeleteMany): an operator acts
// on the jobs a filter showed, and each job is acted on only if it is
// still in a state the filter selected.

func bulkRows() []Row {
	return []Row{rowBulkCancelSparesLeased, rowBulkDeleteSparesRetried, rowBulkAnyState, rowBulkBadInput,
		rowBulkRetryCapacity, rowBulkCancelEventToken}
}

var (
	pendingOnly = []leaserouter.State{leaserouter.StatePending}
	deadOnly    = []leaserouter.State{leaserouter.StateDead}
)

// listed returns the IDs of the jobs in states, as a console shows them.
func listed(t T, a Admin, states ...leaserouter.State) []string {
	t.Helper()
	return listAll(t, a, leaserouter.ListParams{States: states}, nil)
}

// rowBulkCancelSparesLeased: "cancel all pending" leaves alone a job a
// worker leased after the jobs were shown: counted as moved, its lease
// held (its heartbeat accepted, its completion too); the others are
// canceled. An ID given twice counts once; an unknown or invalid one is
// not found.
var rowBulkCancelSparesLeased = Row{Name: "admin/CancelMany of the pending jobs shown spares one leased meanwhile: its lease held", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	shown := listed(t, a, leaserouter.StatePending)
	require.Len(t, shown, 3)
	l := tryAcquire(t, b, "w") // meanwhile, a worker leases one
	res, err := a.CancelMany(ctx, append(shown, shown[0], "unknown", ""), pendingOnly)
	require.NoError(t, err)
	require.Equal(t, leaserouter.BulkResult{Done: 2, Moved: 1, NotFound: 2}, res)
	require.NoError(t, l.Heartbeat(ctx, nil), "the lease taken meanwhile is not canceled: its heartbeat is accepted")
	j := get(t, b, l.JobID())
	require.Equal(t, leaserouter.StateLeased, j.State)
	require.Equal(t, l.Token(), j.Token)
	for _, id := range shown {
		if id != l.JobID() {
			require.Equal(t, leaserouter.StateCanceled, get(t, b, id).State, id)
		}
	}
	require.NoError(t, l.Complete(ctx))
}}

// rowBulkDeleteSparesRetried: "delete all dead" leaves alone a dead job
// retried after the jobs were shown: counted as moved, it survives and
// runs; the other dead jobs are deleted (EventPurged, Stats.Purged).
var rowBulkDeleteSparesRetried = Row{Name: "admin/DeleteMany of the dead jobs shown spares one retried meanwhile", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{MaxAttempts: 1, OnEvent: ev.record})
	a := admin(t, b)
	ctx := ctxOf(t)
	for _, id := range []string{"x", "y", "z"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
		require.NoError(t, tryAcquire(t, b, "w").Fail(ctx, errBoom))
	}
	shown := listed(t, a, leaserouter.StateDead)
	require.Len(t, shown, 3)
	require.NoError(t, a.Retry(ctx, "y")) // meanwhile, someone retries one
	res, err := a.DeleteMany(ctx, shown, deadOnly)
	require.NoError(t, err)
	require.Equal(t, leaserouter.BulkResult{Done: 2, Moved: 1}, res)
	require.Equal(t, leaserouter.StatePending, get(t, b, "y").State, "the retried job survives")
	for _, id := range []string{"x", "z"} {
		_, ok, err := b.Get(ctx, id)
		require.NoError(t, err)
		require.False(t, ok, "%s: deleted", id)
	}
	l := tryAcquire(t, b, "w")
	require.Equal(t, "y", l.JobID())
	require.Equal(t, 1, l.Attempt())
	require.NoError(t, l.Complete(ctx))
	require.EqualValues(t, 2, stats(t, b).Purged)
	require.NoError(t, b.Close(ctx))
	evs := ev.drain()
	for id, n := range map[string]int{"x": 1, "y": 0, "z": 1} {
		require.Equal(t, n, countKind(evs, id, leaserouter.EventPurged), id)
	}
}}

// rowBulkAnyState: with no states, each action acts on every job in a
// state it applies to and counts the rest as not applicable: RetryMany
// retries the finished jobs as Retry does (fresh attempts, place in the
// order kept, EventRetried), CancelMany cancels the unfinished ones (a
// lease lost at once), DeleteMany deletes all but the leased ones.
var rowBulkAnyState = Row{Name: "admin/RetryMany, CancelMany, DeleteMany with no states: every state the action applies to", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{MaxAttempts: 1, OnEvent: ev.record})
	a := admin(t, b)
	ctx := ctxOf(t)
	for _, id := range []string{"dead", "done", "canceled", "leased", "pending"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
	}
	require.NoError(t, tryAcquire(t, b, "w").Fail(ctx, errBoom))
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, b.Cancel(ctx, "canceled"))
	l := tryAcquire(t, b, "w")
	require.Equal(t, "leased", l.JobID())
	all := []string{"dead", "done", "canceled", "leased", "pending"}

	order := listAll(t, a, leaserouter.ListParams{}, nil)
	res, err := a.RetryMany(ctx, all, nil)
	require.NoError(t, err)
	require.Equal(t, leaserouter.BulkResult{Done: 3, NotApplicable: 2}, res)
	require.Equal(t, order, listAll(t, a, leaserouter.ListParams{}, nil), "RetryMany keeps each job's place in the order")
	for _, id := range []string{"dead", "done", "canceled"} {
		j := get(t, b, id)
		require.Equal(t, leaserouter.StatePending, j.State, id)
		require.Zero(t, j.Attempt, "%s: a fresh attempt budget", id)
	}
	require.Equal(t, "boom", get(t, b, "dead").LastError, "LastError kept")
	require.EqualValues(t, 3, stats(t, b).Retried)
	require.NoError(t, l.Heartbeat(ctx, nil), "a leased job is not retried")

	res, err = a.CancelMany(ctx, []string{"leased", "dead"}, nil)
	require.NoError(t, err)
	require.Equal(t, leaserouter.BulkResult{Done: 2}, res)
	requireLost(t, l.Heartbeat(ctx, nil), l.Token(), l.Token(), leaserouter.LostCanceled)
	res, err = a.CancelMany(ctx, []string{"leased"}, nil)
	require.NoError(t, err)
	require.Equal(t, leaserouter.BulkResult{NotApplicable: 1}, res, "a finished job: not applicable")

	held := tryAcquire(t, b, "w")
	res, err = a.DeleteMany(ctx, all, nil)
	require.NoError(t, err)
	require.Equal(t, leaserouter.BulkResult{Done: len(all) - 1, NotApplicable: 1}, res, "all but the leased job")
	require.NoError(t, held.Heartbeat(ctx, nil), "a leased job is not deleted")
	require.Equal(t, []string{held.JobID()}, listAll(t, a, leaserouter.ListParams{}, nil))
	require.NoError(t, held.Complete(ctx))
	require.NoError(t, b.Close(ctx))
	evs := ev.drain()
	require.Equal(t, 1, countKind(evs, "dead", leaserouter.EventRetried))
	require.Equal(t, 1, countKind(evs, "leased", leaserouter.EventCanceled))
}}

// rowBulkBadInput: more than MaxBulkIDs IDs or a state outside the
// constants is an error wrapping ErrInvalidOptions, nothing changed;
// MaxBulkIDs IDs are taken; no IDs do nothing; after Close, ErrClosed
// and a zero result (an invalid ID among them not counted: after an
// error the result counts only the jobs the call looked at).
var rowBulkBadInput = Row{Name: "admin/bulk calls refuse too many IDs or a bad state, and ErrClosed after Close", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	many := make([]string, leaserouter.MaxBulkIDs+1)
	for i := range many {
		many[i] = fmt.Sprintf("id%05d", i)
	}
	many[0] = "a"
	calls := map[string]func([]string, []leaserouter.State) (leaserouter.BulkResult, error){
		"RetryMany": func(ids []string, s []leaserouter.State) (leaserouter.BulkResult, error) {
			return a.RetryMany(ctx, ids, s)
		},
		"CancelMany": func(ids []string, s []leaserouter.State) (leaserouter.BulkResult, error) {
			return a.CancelMany(ctx, ids, s)
		},
		"DeleteMany": func(ids []string, s []leaserouter.State) (leaserouter.BulkResult, error) {
			return a.DeleteMany(ctx, ids, s)
		},
	}
	for name, call := range calls {
		res, err := call(many, nil)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "%s: too many IDs", name)
		require.Zero(t, res, name)
		_, err = call([]string{"a"}, []leaserouter.State{leaserouter.StatePending, 6})
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "%s: a bad state", name)
		res, err = call(nil, nil)
		require.NoError(t, err, name)
		require.Zero(t, res, "%s: no IDs, nothing done", name)
		require.Equal(t, leaserouter.StatePending, get(t, b, "a").State, "%s: nothing changed", name)
	}
	res, err := a.RetryMany(ctx, many[:leaserouter.MaxBulkIDs], nil)
	require.NoError(t, err, "MaxBulkIDs IDs")
	require.Equal(t, leaserouter.BulkResult{NotApplicable: 1, NotFound: leaserouter.MaxBulkIDs - 1}, res)
	require.NoError(t, b.Close(ctx))
	for name, call := range calls {
		res, err := call([]string{"a", ""}, nil)
		require.ErrorIs(t, err, leaserouter.ErrClosed, name)
		require.Zero(t, res, "%s: ErrClosed: no job looked at, the invalid ID not counted", name)
	}
	require.Equal(t, leaserouter.StatePending, get(t, b, "a").State)
}}

// rowBulkRetryCapacity: RetryMany stops at the job that would exceed
// Capacity: what it did so far, and ErrFull; the rest stays finished,
// and an invalid ID after it is not counted (not looked at).
var rowBulkRetryCapacity = Row{Name: "admin/RetryMany stops at Capacity with ErrFull and what it did", Needs: "Capacity", Test: func(t T, h Harness) {
	b := open(t, h, Config{Capacity: 2})
	a := admin(t, b)
	ctx := ctxOf(t)
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, b.Enqueue(ctx, id, ""))
		require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	}
	res, err := a.RetryMany(ctx, []string{"a", "b", "c", ""}, nil)
	require.ErrorIs(t, err, leaserouter.ErrFull)
	require.Equal(t, leaserouter.BulkResult{Done: 2}, res)
	require.Equal(t, leaserouter.StateSucceeded, get(t, b, "c").State)
}}

// rowBulkCancelEventToken: EventCanceled of a job not leased carries the
// job's latest lease's token (0 if it was never leased); of a leased
// job, the lease's.
var rowBulkCancelEventToken = Row{Name: "admin/EventCanceled carries the job's latest token, leased or not", Test: func(t T, h Harness) {
	ev := newEvents()
	b := open(t, h, Config{OnEvent: ev.record})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "leased", ""))
	leased := tryAcquire(t, b, "w")
	require.NoError(t, b.Enqueue(ctx, "released", ""))
	released := tryAcquire(t, b, "w")
	require.NoError(t, released.Release(ctx)) // pending again, its token kept
	require.NoError(t, b.Enqueue(ctx, "never", ""))
	res, err := a.CancelMany(ctx, []string{"released", "leased", "never"}, nil)
	require.NoError(t, err)
	require.Equal(t, leaserouter.BulkResult{Done: 3}, res)
	require.NoError(t, b.Close(ctx))
	want := map[string]leaserouter.Token{"released": released.Token(), "leased": leased.Token(), "never": 0}
	got := map[string]leaserouter.Token{}
	for _, e := range ev.drain() {
		if e.Kind == leaserouter.EventCanceled {
			got[e.JobID] = e.Token
		}
	}
	require.Equal(t, want, got)
}}
