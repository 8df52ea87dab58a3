package leaserouter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestTimeoutKeptByRetryAndList: a job's WithTimeout is in Get's and
// List's snapshots, and stays with the job through Retry (the fresh
// record Retry makes keeps it).
func TestTimeoutKeptByRetryAndList(t *testing.T) {
	r := setup(t, leaserouter.Options{})
	require.NoError(t, r.Enqueue("a", "", leaserouter.WithTimeout(3*time.Second)))
	require.NoError(t, r.Enqueue("b", "", leaserouter.WithTimeout(0)))
	page, err := r.List(leaserouter.ListParams{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2)
	require.Equal(t, time.Duration(0), page.Jobs[0].Timeout, "b: WithTimeout(0) leaves WorkerOptions.Timeout in force")
	require.Equal(t, 3*time.Second, page.Jobs[1].Timeout)
	l := acquire(t, r, "w")
	require.Equal(t, "a", l.JobID)
	require.NoError(t, l.Complete())
	require.NoError(t, r.Retry("a"))
	require.Equal(t, 3*time.Second, get(t, r, "a").Timeout, "Retry keeps the job's timeout")
}

// TestTimeoutsInterned: a Router holds 65,535 distinct WithTimeout
// durations (a job record keeps a 2-byte index); the next distinct one
// is refused with ErrInvalidJob, changing nothing, while one already
// held is still accepted.
func TestTimeoutsInterned(t *testing.T) {
	r := setup(t, leaserouter.Options{})
	const held = 1<<16 - 1
	for i := range held {
		require.NoError(t, r.Enqueue(fmt.Sprint(i), "", leaserouter.WithTimeout(time.Duration(i+1))))
	}
	err := r.Enqueue("one more", "", leaserouter.WithTimeout(held+1))
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, "WithTimeout")
	_, ok := r.Get("one more")
	require.False(t, ok)
	require.NoError(t, r.Enqueue("again", "", leaserouter.WithTimeout(held)), "a duration held already")
	require.Equal(t, time.Duration(held), get(t, r, "again").Timeout)
	require.Equal(t, time.Duration(1), get(t, r, "0").Timeout)
	require.EqualValues(t, held+1, r.Stats().Enqueued)
}

// TestWithTimeoutNotExhaustedByPurgedJobs: WithTimeout's doc refuses only
// a negative d, so a Router that has held many jobs with distinct
// timeouts, all of them gone (deleted) or refused, still accepts a new
// job's WithTimeout: the record of a duration no job has any more is not
// kept for ever.
func TestWithTimeoutNotExhaustedByPurgedJobs(t *testing.T) {
	r := setup(t, leaserouter.Options{})
	const held = 1<<16 - 1
	for i := range held {
		id := fmt.Sprint(i)
		require.NoError(t, r.Enqueue(id, "", leaserouter.WithTimeout(time.Duration(i+1))))
		require.NoError(t, r.Delete(id))
	}
	require.Zero(t, r.Stats().Pending, "no job left")
	// A deadline-derived timeout, as a caller computing it from time.Until would pass.
	require.NoError(t, r.Enqueue("next", "", leaserouter.WithTimeout(held+1)),
		"no job holds any of the earlier durations: a new one must be accepted")
}

// TestWithTimeoutGivenBackWhenRefused: a duration parsed for a job that is
// then refused (a duplicate, ErrFull, ErrClosed, a batch with an invalid
// job or refused whole, a batch's duplicates) is given back, as it is when
// its job is dropped; Retry's fresh record keeps its job's.
func TestWithTimeoutGivenBackWhenRefused(t *testing.T) {
	r := setup(t, leaserouter.Options{Capacity: 3})
	held := func() int { return leaserouter.TimeoutsHeld(r) }
	tmo := func(d time.Duration) []leaserouter.EnqueueOption {
		return []leaserouter.EnqueueOption{leaserouter.WithTimeout(d)}
	}
	require.NoError(t, r.Enqueue("a", "", tmo(time.Second)...))
	require.Equal(t, 1, held())
	require.ErrorIs(t, r.Enqueue("a", "", tmo(2*time.Second)...), leaserouter.ErrDuplicate)
	require.Equal(t, 1, held(), "a duplicate gives its duration back")
	_, err := r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "b", Options: tmo(3 * time.Second)},
		{ID: "c", Options: tmo(4 * time.Second)}, {ID: "", Options: tmo(5 * time.Second)}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.Equal(t, 1, held(), "a batch with an invalid job gives back what it parsed")
	dups, err := r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "a", Options: tmo(6 * time.Second)},
		{ID: "b", Options: tmo(time.Second)}, {ID: "b", Options: tmo(7 * time.Second)}})
	require.NoError(t, err)
	require.Equal(t, []int{0, 2}, dups)
	require.Equal(t, 1, held(), "a batch's duplicates give theirs back; b shares a's")
	require.NoError(t, r.Enqueue("c", "", tmo(8*time.Second)...))
	require.ErrorIs(t, r.Enqueue("d", "", tmo(9*time.Second)...), leaserouter.ErrFull)
	_, err = r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "d", Options: tmo(10 * time.Second)}})
	require.ErrorIs(t, err, leaserouter.ErrFull)
	require.Equal(t, 2, held(), "refused for Capacity: given back")
	l := acquire(t, r, "w")
	require.NoError(t, l.Complete())
	require.NoError(t, r.Retry(l.JobID))
	require.Equal(t, 2, held(), "Retry's fresh record holds its job's")
	require.NoError(t, r.Delete("c"))
	require.Equal(t, 1, held(), "a dropped job gives its duration back")
	require.NoError(t, r.Audit())
	require.NoError(t, r.Close(t.Context()))
	require.ErrorIs(t, r.Enqueue("e", "", tmo(11*time.Second)...), leaserouter.ErrClosed)
	_, err = r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "e", Options: tmo(12 * time.Second)}})
	require.ErrorIs(t, err, leaserouter.ErrClosed)
	require.Equal(t, 1, held(), "refused after Close: given back")
}
