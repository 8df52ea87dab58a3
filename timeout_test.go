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
