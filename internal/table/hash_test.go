package table

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHashSpreadsShortKeys: keys of up to 16 bytes are hashed inline
// (seeds.hash), not by maphash: keys that differ in any one byte, at any
// length from 1 to 16 and past it, get distinct hashes, and sequential
// IDs, the common kind, fill the directory's buckets (top bits) and a
// segment's slots (low bits) evenly; each table has its own seed.
func TestHashSpreadsShortKeys(t *testing.T) {
	tb := newTable()
	seen := map[uint64]string{}
	add := func(k string) {
		h := tb.Hash(k)
		require.Equal(t, h, tb.Hash(k), "the same key, the same hash")
		if o, dup := seen[h]; dup && o != k {
			require.Failf(t, "hash collision", "%q and %q: %#x", o, k, h)
		}
		seen[h] = k
	}
	base := []byte("0123456789abcdefghij")
	for n := 1; n <= len(base); n++ {
		for i := range n {
			for _, b := range []byte{0x01, 0x02, 0x40, 0x80, 0xff} {
				k := []byte(string(base[:n]))
				k[i] ^= b
				add(string(k))
			}
		}
	}
	const n, buckets = 1 << 18, 1 << 8
	var top, low [buckets]int
	for i := range n {
		h := tb.Hash(fmt.Sprint("j", i))
		top[h>>56]++
		low[h&(buckets-1)]++
	}
	for b := range buckets { // expected n/buckets = 1024 each; 6 sigma is ~190
		require.InDelta(t, n/buckets, top[b], 250, "top bits, bucket %d", b)
		require.InDelta(t, n/buckets, low[b], 250, "low bits, bucket %d", b)
	}
	require.NotEqual(t, tb.Hash("j1"), newTable().Hash("j1"), "a seed per table")
}
