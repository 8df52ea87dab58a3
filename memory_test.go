package leaserouter_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// burst enqueues n jobs, drains them, then goes on with light use, and
// returns the live heap above base at the peak and at the end.
func burst(t testing.TB, r *leaserouter.Router[int], n int, base uint64) (peak, after uint64) {
	for i := range n {
		require.NoError(t, r.Enqueue("burst-"+strconv.Itoa(i), i))
	}
	peak = heapInUse() - base
	for range n {
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.NoError(t, l.Complete())
	}
	for i := range 1000 { // light use after the burst
		require.NoError(t, r.Enqueue("light-"+strconv.Itoa(i), i))
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.NoError(t, l.Complete())
	}
	return peak, max(heapInUse(), base) - base
}

// TestMemoryReturnsAfterBurst: after a burst of jobs drains, the ID index
// and the queues shrink, so the heap held by the router returns to a small
// fraction of its peak. (Before, the index and the ready queue kept their
// peak size: about a fifth of the peak stayed.)
func TestMemoryReturnsAfterBurst(t *testing.T) {
	const n = 200_000
	base := heapInUse()
	r, err := leaserouter.New[int](leaserouter.Options{Retention: -1})
	require.NoError(t, err)
	defer r.Close(t.Context())
	peak, after := burst(t, r, n, base)
	t.Logf("peak %d KiB, after %d KiB", peak>>10, after>>10)
	require.Greater(t, peak, uint64(n*100), "the burst was measured")
	require.Less(t, after, peak/20, "heap after the burst: %d of %d bytes", after, peak)
	runtime.KeepAlive(r)
}

// TestMemoryReturnsAfterBurstWhoseFewJobsLiveOn: Enqueue takes its job
// records from blocks of a few, and a block lives while any of its jobs
// does; after a burst of single Enqueues whose every 256th job lives on
// (scheduled an hour ahead), the heap still returns to a small fraction
// of its peak (as a batch's blocks do: TestMemoryReturnsAfterBatchedBurst).
func TestMemoryReturnsAfterBurstWhoseFewJobsLiveOn(t *testing.T) {
	const n, every = 200_192, 256
	payload := strings.Repeat("p", 64)
	base := heapInUse()
	r, err := leaserouter.New[string](leaserouter.Options{Retention: -1})
	require.NoError(t, err)
	defer r.Close(t.Context())
	for i := range n {
		var opts []leaserouter.EnqueueOption
		if i%every == 0 {
			opts = append(opts, leaserouter.WithDelay(time.Hour))
		}
		// A fresh payload each, as a real job's would be.
		require.NoError(t, r.Enqueue("j"+strconv.Itoa(i), payload[:63]+strconv.Itoa(i%10), opts...))
	}
	peak := heapInUse() - base
	for range n - n/every {
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.NoError(t, l.Complete())
	}
	after := max(heapInUse(), base) - base
	t.Logf("peak %d KiB, after %d KiB (%.1f%%)", peak>>10, after>>10, 100*float64(after)/float64(peak))
	require.Equal(t, n/every, r.Stats().Scheduled, "the long-lived jobs are still there")
	require.Less(t, after, peak/20, "heap after the burst: %d of %d bytes", after, peak)
	runtime.KeepAlive(r)
}

// BenchmarkMemoryBurst reports the live heap held by a Router (Retention
// -1, no hook) at the peak of a 2,000,000-job burst (peak-MB) and after
// the burst drains and 1,000 more jobs pass through (after-MB).
func BenchmarkMemoryBurst(b *testing.B) {
	const n = 2_000_000
	var peak, after uint64
	for b.Loop() {
		base := heapInUse()
		r, err := leaserouter.New[int](leaserouter.Options{Retention: -1})
		require.NoError(b, err)
		peak, after = burst(b, r, n, base)
		require.NoError(b, r.Close(b.Context()))
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-MB")
	b.ReportMetric(float64(after)/(1<<20), "after-MB")
	b.ReportMetric(0, "ns/op")
}

// TestMemoryFollowsJobsAfterDelete: memory follows the live jobs through
// admin calls too. 200,000 finished jobs (Retention 24h) deleted one by
// one leave the heap at a small fraction of its peak: a deleted job's
// record leaves the retention queue with it, not when its Retention ends.
// (Before, the retention queue kept every deleted record for 24h: about
// 70% of the peak stayed.)
func TestMemoryFollowsJobsAfterDelete(t *testing.T) {
	const n = 200_000
	base := heapInUse()
	r, err := leaserouter.New[int](leaserouter.Options{Retention: 24 * time.Hour})
	require.NoError(t, err)
	defer r.Close(t.Context())
	for i := range n {
		require.NoError(t, r.Enqueue("done-"+strconv.Itoa(i), i))
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.NoError(t, l.Complete())
	}
	peak := heapInUse() - base
	for i := range n {
		require.NoError(t, r.Delete("done-"+strconv.Itoa(i)))
	}
	after := max(heapInUse(), base) - base
	t.Logf("peak %d KiB, after %d KiB", peak>>10, after>>10)
	require.Greater(t, peak, uint64(n*100), "the finished jobs were measured")
	require.Less(t, after, peak/20, "heap after deleting every job: %d of %d bytes", after, peak)
	require.Zero(t, r.Stats().Succeeded)
	require.NoError(t, r.Audit())
	runtime.KeepAlive(r)
}

// TestMemoryFlatUnderRetryChurn: one job retried 200,000 times (Retention
// 24h; canceled between Retries, which finishes it) holds what one job
// holds: Retry's fresh record replaces the old one in the retention
// queue rather than leaving it there until its Retention ends. (Before,
// every Retry left about 176 bytes behind for 24h.)
func TestMemoryFlatUnderRetryChurn(t *testing.T) {
	const n = 200_000
	r, err := leaserouter.New[int](leaserouter.Options{Retention: 24 * time.Hour})
	require.NoError(t, err)
	defer r.Close(t.Context())
	require.NoError(t, r.Enqueue("churn", 1))
	churn := func(rounds int) {
		for range rounds {
			require.NoError(t, r.Cancel("churn"))
			require.NoError(t, r.Retry("churn"))
		}
	}
	churn(1000) // warm: whatever the first rounds allocate for good
	base := heapInUse()
	churn(n)
	grown := int64(heapInUse()) - int64(base)
	t.Logf("heap grew by %d bytes over %d Retries", grown, n)
	require.Less(t, grown, int64(n*8), "heap grew by %d bytes over %d Retries (%.1f per Retry)", grown, n, float64(grown)/n)
	require.EqualValues(t, 1, r.Stats().Pending)
	require.NoError(t, r.Audit())
	runtime.KeepAlive(r)
}

// TestMemoryReturnsWhenPurgedJobsHadMetadata: single Enqueues and
// batches whose every 7th job lives on (an hour ahead), each job with
// about 1 KiB of metadata. Once the others are done and purged, the heap
// holds about a seventh of its peak: a purged record keeps its metadata
// (a stale Lease may read it), so a record sharing a block of records
// with a survivor would keep its map alive.
func TestMemoryReturnsWhenPurgedJobsHadMetadata(t *testing.T) {
	const n, every = 70_000, 7
	meta := func(i int) map[string]string {
		md := map[string]string{}
		for k := range 4 { // fresh strings: the job's metadata is its own
			md["k"+strconv.Itoa(k)] = strings.Repeat(strconv.Itoa(i%10), 250)[:249] + strconv.Itoa(k)
		}
		return md
	}
	for _, batch := range []bool{false, true} {
		t.Run("EnqueueMany="+strconv.FormatBool(batch), func(t *testing.T) {
			base := heapInUse()
			r, err := leaserouter.New[int](leaserouter.Options{Retention: -1})
			require.NoError(t, err)
			defer r.Close(t.Context())
			var specs []leaserouter.JobSpec[int]
			for i := range n {
				opts := []leaserouter.EnqueueOption{leaserouter.WithMetadata(meta(i))}
				if i%every == 0 {
					opts = append(opts, leaserouter.WithDelay(time.Hour))
				}
				if !batch {
					require.NoError(t, r.Enqueue("j"+strconv.Itoa(i), i, opts...))
					continue
				}
				specs = append(specs, leaserouter.JobSpec[int]{ID: "j" + strconv.Itoa(i), Payload: i, Options: opts})
				if len(specs) == 256 || i == n-1 {
					_, err := r.EnqueueMany(specs)
					require.NoError(t, err)
					specs = specs[:0]
				}
			}
			specs = nil
			peak := heapInUse() - base
			for range n - (n+every-1)/every {
				l, err := r.TryAcquire("w")
				require.NoError(t, err)
				require.NoError(t, l.Complete())
			}
			after := max(heapInUse(), base) - base
			t.Logf("peak %d KiB, after %d KiB (%.1f%%)", peak>>10, after>>10, 100*float64(after)/float64(peak))
			require.Equal(t, (n+every-1)/every, r.Stats().Scheduled)
			require.Less(t, after, peak/4, "heap after the burst: %d of %d bytes", after, peak)
			runtime.KeepAlive(r)
		})
	}
}
