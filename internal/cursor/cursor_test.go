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
