package table

import (
	"hash/maphash"
	"math/bits"
)

// seeds are a table's hash seeds: maphash's for long keys, and the
// secret of the short keys' hash.
type seeds struct {
	long  maphash.Seed
	short [3]uint64
}

// hash is Hash's work, outside the generic type, so that the compiler
// inlines Hash at its callers and calls this directly. A key of at most
// 16 bytes (most IDs) is hashed with wyhash's short-input path, which is
// also what Go's runtime hashes strings with where the CPU has no AES
// instructions (runtime/hash64.go's memhashFallback), here without the
// calls into the runtime (maphash.String costs a 7-byte ID about 64
// instructions; this, about 33): its bytes go into two words a and b
// (overlapping loads, as the runtime does), each mixed with a word of the
// secret by a 64x64->128-bit multiply folded to 64 bits, then mixed again
// with the length, so that every bit of the key reaches every bit of the
// hash, and both the directory (top bits) and the slot (low bits) spread.
// Longer keys go to hash/maphash.
func (s *seeds) hash(key string) uint64 {
	var a, b uint64
	switch n := len(key); {
	case n > 16:
		return maphash.String(s.long, key)
	case n >= 8:
		a, b = load8(key), load8(key[n-8:])
	case n >= 4:
		a, b = load4(key), load4(key[n-4:])
	case n > 0:
		a = uint64(key[0]) | uint64(key[n>>1])<<8 | uint64(key[n-1])<<16
	}
	k := &s.short
	return mix(0x1d8e4e27c47d124f^uint64(len(key)), mix(a^k[1], b^k[0]^k[2]))
}

// mix folds the 128-bit product of a and b to 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// load8 is the first 8 bytes of s, little-endian (one load).
func load8(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// load4 is the first 4 bytes of s, little-endian (one load).
func load4(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}
