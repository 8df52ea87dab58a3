package leaserouter

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// bytesPer returns the bytes allocated per call of f, over n calls.
func bytesPer(n int, f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	for range n {
		f()
	}
	runtime.ReadMemStats(&b)
	return (b.TotalAlloc - a.TotalAlloc) / uint64(n)
}

// TestRefusedEnqueueAllocatesNoBlock: an Enqueue allocates, before the
// lock, what an earlier call left word the router wants (a block of job
// records, a segment of the ID index); one refused as a duplicate or with
// ErrFull stocks it and takes the word back, so the calls after it do not
// allocate another, to be dropped, each time.
func TestRefusedEnqueueAllocatesNoBlock(t *testing.T) {
	t.Run("records", func(t *testing.T) {
		r, err := New[int](Options{Retention: -1, Capacity: 1})
		require.NoError(t, err)
		defer r.Close(t.Context())
		require.NoError(t, r.Enqueue("a", 1)) // takes the reserve block: word that one is wanted
		dup := bytesPer(1000, func() { _ = r.Enqueue("a", 1) })
		full := bytesPer(1000, func() { _ = r.Enqueue("b", 1) })
		require.Less(t, dup, uint64(512), "a duplicate Enqueue allocates a block of records it drops")
		require.Less(t, full, uint64(512), "an ErrFull Enqueue allocates a block of records it drops")
	})
	t.Run("segment", func(t *testing.T) {
		r, err := New[int](Options{})
		require.NoError(t, err)
		defer r.Close(t.Context())
		for i := 0; r.growth.want.Load()&wantSegment == 0; i++ {
			require.NoError(t, r.Enqueue("j"+strconv.Itoa(i), i))
		}
		dup := bytesPer(200, func() { _ = r.Enqueue("j0", 0) })
		require.Less(t, dup, uint64(4096), "a duplicate Enqueue allocates a segment it drops")
	})
}
