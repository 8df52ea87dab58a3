package cursor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoundTrip: a cursor decodes to its sequence number under the same
// filters, and is refused under others or when mangled.
func TestRoundTrip(t *testing.T) {
	c := Encode(42, 0b101, "img-")
	seq, err := Decode(c, 0b101, "img-")
	require.NoError(t, err)
	require.Equal(t, uint64(42), seq)

	_, err = Decode(c, 0b100, "img-")
	require.ErrorIs(t, err, ErrOtherFilters)
	_, err = Decode(c, 0b101, "img")
	require.ErrorIs(t, err, ErrOtherFilters)
	for _, bad := range []string{"", "x", c[:len(c)-1], c + "A", "!" + c[1:], Encode(0, 0b101, "img-")} {
		_, err = Decode(bad, 0b101, "img-")
		require.ErrorIs(t, err, ErrMalformed, "%q", bad)
	}
}

// TestScopedCursorOnlyInItsScope: a cursor made in a scope (a queue)
// decodes in that scope alone, under the same filters; the unscoped
// cursors are as before scopes existed.
func TestScopedCursorOnlyInItsScope(t *testing.T) {
	c := EncodeIn("emails", 42, 0b101, "img-")
	seq, err := DecodeIn("emails", c, 0b101, "img-")
	require.NoError(t, err)
	require.Equal(t, uint64(42), seq)
	for _, other := range []struct {
		scope, prefix string
	}{{"images", "img-"}, {"", "img-"}, {"emails", "img"}, {"s", "img-email"}, {"img-emails", ""}} {
		_, err = DecodeIn(other.scope, c, 0b101, other.prefix)
		require.ErrorIs(t, err, ErrOtherFilters, "%+v", other)
	}
	_, err = Decode(c, 0b101, "img-")
	require.ErrorIs(t, err, ErrOtherFilters)
	// An unscoped cursor is the one Encode made before scopes existed.
	require.Equal(t, "AQAAAAAAAAAqB_MnLrHx6oY", Encode(42, 0b101, "img-"))
	require.Equal(t, Encode(42, 0b101, "img-"), EncodeIn("", 42, 0b101, "img-"))
}
