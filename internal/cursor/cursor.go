// Package cursor is the keyset cursor of Router.List on both backends: an
// opaque string naming the last job of a page (its enqueue order) and the
// filters it was made under (and, on a backend whose Routers share one
// sequence of enqueue orders, the queue), so that the next page starts
// right after it and a cursor used with other filters, or on another
// queue, is refused rather than read wrong.
package cursor

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/fnv"
)

// version is the first byte of every cursor: a later format can refuse
// this one by name.
const version = 1

// size is a cursor's length before encoding: the version, the sequence
// number and the filters' fingerprint.
const size = 1 + 8 + 8

// Encode returns the cursor of a page whose last job has enqueue order
// seq, made with the states of mask (bit s: state s) and an ID prefix.
func Encode(seq uint64, mask uint8, prefix string) string {
	return EncodeIn("", seq, mask, prefix)
}

// EncodeIn is Encode for a cursor valid in scope only (a queue of a
// backend where queues share the enqueue orders): DecodeIn of another
// scope refuses it as made under other filters. The empty scope is
// Encode's: its cursors are unchanged.
func EncodeIn(scope string, seq uint64, mask uint8, prefix string) string {
	var b [size]byte
	b[0] = version
	binary.BigEndian.PutUint64(b[1:], seq)
	binary.BigEndian.PutUint64(b[9:], fingerprint(scope, mask, prefix))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Errors of Decode (callers wrap them with their invalid-options error).
var (
	ErrMalformed    = errors.New("malformed cursor")
	ErrOtherFilters = errors.New("cursor made under other filters")
)

// Decode returns the sequence number of cursor s, made with mask and
// prefix; an error if s is not a cursor (ErrMalformed) or was made under
// other filters (ErrOtherFilters).
func Decode(s string, mask uint8, prefix string) (uint64, error) {
	return DecodeIn("", s, mask, prefix)
}

// DecodeIn is Decode of a cursor made by EncodeIn in scope: one made in
// another scope is ErrOtherFilters.
func DecodeIn(scope, s string, mask uint8, prefix string) (uint64, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != size || b[0] != version {
		return 0, ErrMalformed
	}
	seq := binary.BigEndian.Uint64(b[1:])
	if seq == 0 {
		return 0, ErrMalformed
	}
	if binary.BigEndian.Uint64(b[9:]) != fingerprint(scope, mask, prefix) {
		return 0, ErrOtherFilters
	}
	return seq, nil
}

// fingerprint hashes the filters and the scope (FNV-1a, 64 bits). With
// no scope, the mask and the prefix as they are (so Encode's cursors made
// before scopes existed stay valid for Decode; a caller that moved to a
// scope refuses its own older cursors, as made under other filters); with one, the prefix's length comes before
// it, so that no other prefix and scope hash the same bytes.
func fingerprint(scope string, mask uint8, prefix string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte{mask})
	if scope != "" {
		_, _ = h.Write(binary.AppendUvarint(nil, uint64(len(prefix))))
	}
	_, _ = h.Write([]byte(prefix))
	_, _ = h.Write([]byte(scope))
	return h.Sum64()
}
