package routertest

import (
	"fmt"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// rowRunNow: RunNow makes a scheduled job pending now — a delayed one,
// and a retry waiting out its backoff, which keeps its attempt count,
// LastError and token — and refuses a job that is not scheduled
// (pending, leased, finished) with ErrNotScheduled, changing nothing; an
// unknown ID is ErrNotFound (after Close, ErrClosed: rowAdminAfterClose).
var rowRunNow = Row{Name: "admin/RunNow a scheduled job: pending now, attempt kept; one not scheduled refused", Test: func(t T, h Harness) {
	b := open(t, h, Config{MaxAttempts: 3, Backoff: func(int) time.Duration { return time.Hour }})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "retrying", "r"))
	first := tryAcquire(t, b, "w")
	require.NoError(t, first.Fail(ctx, errBoom))
	require.NoError(t, b.Enqueue(ctx, "delayed", "d", leaserouter.WithDelay(time.Hour)))
	require.NoError(t, b.Enqueue(ctx, "done", ""))
	require.NoError(t, tryAcquire(t, b, "w").Complete(ctx))
	require.NoError(t, b.Enqueue(ctx, "leased", ""))
	leased := tryAcquire(t, b, "w")
	require.Equal(t, "leased", leased.JobID())
	require.NoError(t, b.Enqueue(ctx, "pending", ""))
	require.Equal(t, leaserouter.StateScheduled, get(t, b, "retrying").State)

	for _, id := range []string{"pending", "leased", "done"} {
		before := get(t, b, id)
		require.ErrorIs(t, a.RunNow(ctx, id), leaserouter.ErrNotScheduled, id)
		require.Equal(t, before, get(t, b, id), "%s: nothing changed", id)
	}
	require.ErrorIs(t, a.RunNow(ctx, "unknown"), leaserouter.ErrNotFound)

	require.NoError(t, a.RunNow(ctx, "retrying"))
	j := get(t, b, "retrying")
	require.Equal(t, leaserouter.StatePending, j.State)
	require.True(t, j.RunAt.IsZero(), "pending: no run-at")
	require.Equal(t, 1, j.Attempt, "the attempt count kept")
	require.Equal(t, "boom", j.LastError, "LastError kept")
	require.Equal(t, first.Token(), j.Token)
	require.ErrorIs(t, a.RunNow(ctx, "retrying"), leaserouter.ErrNotScheduled, "pending now: not again")
	require.NoError(t, a.RunNow(ctx, "delayed"))
	require.Equal(t, leaserouter.StatePending, get(t, b, "delayed").State)

	// Leased at once, not in an hour: "pending" first (ready before
	// them), then the two made ready now; the retry as its second attempt.
	got := map[string]int{}
	for range 3 {
		l := tryAcquire(t, b, "w")
		got[l.JobID()] = l.Attempt()
		require.Greater(t, l.Token(), leased.Token())
		require.NoError(t, l.Complete(ctx))
	}
	require.Equal(t, map[string]int{"pending": 1, "retrying": 2, "delayed": 1}, got)
	require.NoError(t, leased.Complete(ctx))
}}

// rowReadySince: Stats.ReadySince is the ready time of the job first in
// the ready order (the next a lease takes), the zero Time when none is
// pending, and stays put while nothing changes (an instant, not an age).
var rowReadySince = Row{Name: "admin/Stats.ReadySince is the head of the ready order's ready time, zero when none pending", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.True(t, stats(t, b).ReadySince.IsZero(), "nothing pending")
	require.NoError(t, b.Enqueue(ctx, "old", ""))
	old := get(t, b, "old")
	require.True(t, stats(t, b).ReadySince.Equal(old.CreatedAt), "the oldest pending job's enqueue time")
	h.Advance(h.Lease() / 10)
	require.True(t, stats(t, b).ReadySince.Equal(old.CreatedAt), "an instant: unchanged as time passes")
	require.NoError(t, b.Enqueue(ctx, "urgent", "", leaserouter.WithPriority(5)))
	urgent := get(t, b, "urgent")
	require.True(t, stats(t, b).ReadySince.Equal(urgent.CreatedAt), "the head of the ready order: priority first")
	l := tryAcquire(t, b, "w")
	require.Equal(t, "urgent", l.JobID())
	require.True(t, stats(t, b).ReadySince.Equal(old.CreatedAt))
	l2 := tryAcquire(t, b, "w")
	require.True(t, stats(t, b).ReadySince.IsZero(), "nothing pending again")
	require.NoError(t, l.Complete(ctx))
	require.NoError(t, l2.Complete(ctx))
}}

// rowLeasedAt: a leased job's LeasedAt is its lease's grant instant, and
// UpdatedAt equals it until the lease's first heartbeat, after which it
// is that heartbeat's instant; a job not leased has a zero LeasedAt (Get
// and Leases alike).
var rowLeasedAt = Row{Name: "admin/Job.LeasedAt is the lease's grant; UpdatedAt equals it until a heartbeat", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "j", ""))
	require.True(t, get(t, b, "j").LeasedAt.IsZero(), "pending: never leased")
	l := tryAcquire(t, b, "w")
	j := get(t, b, "j")
	require.False(t, j.LeasedAt.IsZero())
	require.True(t, j.UpdatedAt.Equal(j.LeasedAt), "no heartbeat yet: UpdatedAt is the grant")
	leases, err := a.Leases(ctx, 0)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	require.True(t, leases[0].LeasedAt.Equal(j.LeasedAt), "Leases says the same")
	h.Advance(h.Lease() / 10)
	require.NoError(t, l.Heartbeat(ctx, nil))
	hb := get(t, b, "j")
	require.True(t, hb.LeasedAt.Equal(j.LeasedAt), "a heartbeat keeps the grant")
	require.True(t, hb.UpdatedAt.After(hb.LeasedAt), "UpdatedAt: the heartbeat's instant")
	require.NoError(t, l.Complete(ctx))
	require.True(t, get(t, b, "j").LeasedAt.IsZero(), "finished: no lease")
}}

// rowLeasePages: LeasePage pages the live leases in Leases' order
// (expiry, then enqueue order) by a cursor: every lease once, NextCursor
// "" on the last page, and a lease heartbeated meanwhile (moved later)
// is not skipped; a malformed cursor, a List cursor, or a bad Limit is
// ErrInvalidOptions.
var rowLeasePages = Row{Name: "admin/LeasePage pages the leases soonest expiry first by a cursor", Test: func(t T, h Harness) {
	// Leases of an hour: on a real clock (PostgreSQL) seven grants on a
	// busy machine outlast a lease of the harness's second, and an
	// expired lease is not listed.
	b := open(t, h, Config{LeaseDuration: time.Hour})
	a := admin(t, b)
	ctx := ctxOf(t)
	var held []Lease
	for i := range 7 {
		require.NoError(t, b.Enqueue(ctx, fmt.Sprintf("j%d", i), ""))
		held = append(held, tryAcquire(t, b, "w"))
	}
	all, err := a.Leases(ctx, 0)
	require.NoError(t, err)
	require.Len(t, all, 7)
	var got []string
	p := leaserouter.LeasesParams{Limit: 3}
	for page := 0; ; page++ {
		require.Less(t, page, 4, "the pages end")
		res, err := a.LeasePage(ctx, p)
		require.NoError(t, err)
		require.LessOrEqual(t, len(res.Jobs), 3)
		for _, j := range res.Jobs {
			require.Equal(t, leaserouter.StateLeased, j.State)
			require.Equal(t, "w", j.Owner)
			got = append(got, j.ID)
		}
		if res.NextCursor == "" {
			break
		}
		if page == 0 { // a lease not listed yet, heartbeated: later, not skipped
			h.Advance(h.Lease() / 100)
			require.NoError(t, held[5].Heartbeat(ctx, nil))
			// and one listed, ended: the next page starts after the cursor,
			// not after as many leases as were listed
			require.NoError(t, held[0].Complete(ctx))
		}
		p.Cursor = res.NextCursor
	}
	want := ids(all)
	require.Equal(t, want[:3], got[:3], "the first page is Leases' first")
	require.ElementsMatch(t, want, got, "every lease once")
	require.Equal(t, "j5", got[len(got)-1], "the heartbeated lease last: its expiry is the latest")

	list, err := a.List(ctx, leaserouter.ListParams{Limit: 1})
	require.NoError(t, err)
	for _, bad := range []leaserouter.LeasesParams{{Cursor: "x"}, {Cursor: list.NextCursor}, {Limit: -1}, {Limit: leaserouter.MaxListLimit + 1}} {
		_, err := a.LeasePage(ctx, bad)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "%+v", bad)
	}
	for _, l := range held[1:] {
		require.NoError(t, l.Complete(ctx))
	}
	res, err := a.LeasePage(ctx, leaserouter.LeasesParams{})
	require.NoError(t, err)
	require.Empty(t, res.Jobs)
	require.Empty(t, res.NextCursor)
}}
