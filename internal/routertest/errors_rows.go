package routertest

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// A job's error history (Job.Errors), on every backend.

func errorsRows() []Row { return []Row{rowAttemptErrors} }

// requireRecords checks that errs are records of attempts (number,
// worker, error) in that order, their instants set and never going back.
func requireRecords(t T, errs []leaserouter.AttemptError, want ...leaserouter.AttemptError) {
	t.Helper()
	require.Len(t, errs, len(want), "records: %+v", errs)
	for i, e := range errs {
		require.Equal(t, want[i].Attempt, e.Attempt, "record %d's attempt", i)
		require.Equal(t, want[i].Worker, e.Worker, "record %d's worker", i)
		require.Equal(t, want[i].Error, e.Error, "record %d's error", i)
		require.False(t, e.At.IsZero(), "record %d's instant", i)
		if i > 0 {
			require.False(t, e.At.Before(errs[i-1].At), "records oldest first: %v before %v", e.At, errs[i-1].At)
		}
	}
}

// rowAttemptErrors: every failed attempt leaves a record in Job.Errors,
// oldest first — a Fail (its cause's text) and an expiry ("lease
// expired", the holder whose lease expired) — and nothing else does
// (success, Release, Snooze); LastError is the last record's Error; Retry
// keeps them (the new attempts' follow, numbered from 1 again); a job
// keeps the last MaxAttemptErrors of them, each error's text cut to
// MaxErrorBytes on a rune boundary; List with OmitPayload carries none,
// List without it does, as Get.
var rowAttemptErrors = Row{Name: "attempts/Errors records every failed attempt: worker, error, time; the last MaxAttemptErrors kept", Test: func(t T, h Harness) {
	const n = leaserouter.MaxAttemptErrors
	b := open(t, h, Config{MaxAttempts: n + 10})
	a := admin(t, b)
	ctx := ctxOf(t)
	rec := func(attempt int, worker, text string) leaserouter.AttemptError {
		return leaserouter.AttemptError{Attempt: attempt, Worker: worker, Error: text}
	}

	// Twice failed, released, snoozed, then succeeded.
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	require.Nil(t, get(t, b, "a").Errors, "none before any attempt")
	require.NoError(t, tryAcquire(t, b, "w1").Fail(ctx, errors.New("first")))
	require.NoError(t, tryAcquire(t, b, "w2").Fail(ctx, errors.New("second")))
	require.NoError(t, tryAcquire(t, b, "w3").Release(ctx))
	require.NoError(t, tryAcquire(t, b, "w4").Snooze(ctx, 0))
	l := tryAcquire(t, b, "w5")
	require.Equal(t, 4, l.Attempt(), "the release counted, the snooze did not")
	require.NoError(t, l.Complete(ctx))
	j := get(t, b, "a")
	require.Equal(t, leaserouter.StateSucceeded, j.State)
	requireRecords(t, j.Errors, rec(1, "w1", "first"), rec(2, "w2", "second"))
	require.Equal(t, "second", j.LastError, "LastError is the last record's")

	// Retry keeps them; the new attempts' follow.
	require.NoError(t, a.Retry(ctx, "a"))
	l = tryAcquire(t, b, "w6")
	require.Equal(t, 1, l.Attempt())
	require.NoError(t, l.Fail(ctx, errors.New("third")))
	requireRecords(t, get(t, b, "a").Errors, rec(1, "w1", "first"), rec(2, "w2", "second"), rec(1, "w6", "third"))
	require.NoError(t, tryAcquire(t, b, "w6").Complete(ctx))

	// An expiry: "lease expired", by the holder whose lease it was.
	require.NoError(t, b.Enqueue(ctx, "b", ""))
	l = tryAcquire(t, b, "w7")
	require.Equal(t, "b", l.JobID())
	expire(h, l, h.Lease())
	j = get(t, b, "b")
	require.Equal(t, leaserouter.StatePending, j.State)
	requireRecords(t, j.Errors, rec(1, "w7", "lease expired"))
	require.Equal(t, "lease expired", j.LastError)

	// List carries them as Get does; with OmitPayload, none.
	page, err := a.List(ctx, leaserouter.ListParams{})
	require.NoError(t, err)
	require.Equal(t, []string{"b", "a"}, ids(page.Jobs))
	require.Equal(t, get(t, b, "a").Errors, page.Jobs[1].Errors, "List without OmitPayload: as Get")
	page, err = a.List(ctx, leaserouter.ListParams{OmitPayload: true})
	require.NoError(t, err)
	for _, j := range page.Jobs {
		require.Nil(t, j.Errors, "%s: List with OmitPayload: no records", j.ID)
		require.NotEmpty(t, j.LastError, "%s: LastError stays", j.ID)
	}
	require.NoError(t, a.Delete(ctx, "b"))

	// n+3 failures keep the last n; a long text is cut on a rune
	// boundary (a 4-byte rune straddles MaxErrorBytes).
	long := strings.Repeat("x", leaserouter.MaxErrorBytes-2) + "😀tail"
	require.NoError(t, b.Enqueue(ctx, "c", ""))
	for i := 1; i <= n+3; i++ {
		l := tryAcquire(t, b, fmt.Sprintf("w%d", i))
		require.Equal(t, "c", l.JobID())
		text := fmt.Sprintf("failure %d", i)
		if i == n+3 {
			text = long
		}
		require.NoError(t, l.Fail(ctx, errors.New(text)))
	}
	j = get(t, b, "c")
	require.Len(t, j.Errors, n, "the last MaxAttemptErrors")
	want := make([]leaserouter.AttemptError, 0, n)
	for i := 4; i < n+3; i++ {
		want = append(want, rec(i, fmt.Sprintf("w%d", i), fmt.Sprintf("failure %d", i)))
	}
	cut := strings.Repeat("x", leaserouter.MaxErrorBytes-2)
	want = append(want, rec(n+3, fmt.Sprintf("w%d", n+3), cut))
	requireRecords(t, j.Errors, want...)
	require.True(t, utf8.ValidString(j.LastError))
	require.Equal(t, cut, j.LastError, "LastError is cut as the record is")
}}
