package contract

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
)

// The cursor of a leases page (LeasePage) on every backend: the lease
// order's key of the page's last lease, an expiry instant in the
// backend's units (the core's clock in nanoseconds, pgrouter's Unix
// microseconds) and its job's enqueue order, with a hash of the scope
// (pgrouter: the queue) so a cursor of another queue is refused, not
// read as a position in this one.

// leaseCursorLen: a tag byte, the instant, the enqueue order and the
// scope's hash.
const leaseCursorLen = 1 + 8 + 8 + 4

// leaseCursorTag marks a leases cursor (a List cursor is refused).
const leaseCursorTag = 'L'

// EncodeLeaseCursor returns the cursor after the lease of key (at, seq)
// in scope.
func EncodeLeaseCursor(scope string, at int64, seq uint64) string {
	var b [leaseCursorLen]byte
	b[0] = leaseCursorTag
	binary.BigEndian.PutUint64(b[1:], uint64(at))
	binary.BigEndian.PutUint64(b[9:], seq)
	binary.BigEndian.PutUint32(b[17:], scopeHash(scope))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// DecodeLeaseCursor returns the key of cursor s, made in scope, or an
// error wrapping errInvalid (the core's ErrInvalidOptions) naming the
// problem: malformed, or made in another scope.
func DecodeLeaseCursor(errInvalid error, scope, s string) (at int64, seq uint64, err error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil && (len(b) != leaseCursorLen || b[0] != leaseCursorTag) {
		err = errors.New("not a cursor of a leases page")
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%w: LeasesParams.Cursor is malformed: %w", errInvalid, err)
	}
	if binary.BigEndian.Uint32(b[17:]) != scopeHash(scope) {
		return 0, 0, fmt.Errorf("%w: LeasesParams.Cursor was made on another queue than %s", errInvalid, Quote(scope))
	}
	return int64(binary.BigEndian.Uint64(b[1:])), binary.BigEndian.Uint64(b[9:]), nil
}

func scopeHash(scope string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(scope))
	return h.Sum32()
}
