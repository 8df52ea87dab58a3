package leaserouter_test

import (
	"fmt"
	"testing"
	"testing/synctest"
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

// TestDeadlineTimeoutsUnderDefaultRetention: WithTimeout durations
// derived from each request's deadline (all distinct), enqueued at a
// steady 110 jobs a second for 15 minutes under the default Retention,
// with about 535 jobs unfinished at any time: Enqueue never refuses one,
// and every job's Timeout is its own, while leased and after it
// finished; Retry keeps it. (Before, finished jobs held their interned
// durations until purged: 10 minutes at 110/s fill the 65,535 slots, and
// Enqueue refused valid jobs with ErrInvalidJob while 535 were
// unfinished.)
func TestDeadlineTimeoutsUnderDefaultRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: time.Hour})
		const rate, seconds, unfinished = 110, 15 * 60, 535
		timeoutOf := func(i int) time.Duration { return 30*time.Second + time.Duration(i) }
		for i := range rate * seconds {
			deadline := time.Now().Add(timeoutOf(i)) // a request's deadline, say
			require.NoError(t, r.Enqueue(fmt.Sprint(i), "", leaserouter.WithTimeout(time.Until(deadline))),
				"job %d, %v in, with %d unfinished", i, time.Duration(i)*time.Second/rate, unfinished)
			if i < unfinished {
				time.Sleep(time.Second / rate)
				continue
			}
			l := acquire(t, r, "w")
			id := i - unfinished // the oldest pending job
			require.Equal(t, fmt.Sprint(id), l.JobID)
			require.Equal(t, timeoutOf(id), get(t, r, l.JobID).Timeout, "leased")
			require.NoError(t, l.Complete())
			require.Equal(t, timeoutOf(id), get(t, r, l.JobID).Timeout, "finished")
			time.Sleep(time.Second / rate)
		}
		require.Equal(t, unfinished, r.Stats().Pending)
		last := fmt.Sprint(rate*seconds - unfinished - 1) // finished just now
		require.NoError(t, r.Retry(last))
		require.Equal(t, timeoutOf(rate*seconds-unfinished-1), get(t, r, last).Timeout, "Retry keeps it")
		require.NoError(t, r.Audit())
	})
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
