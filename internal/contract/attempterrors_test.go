package contract

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestTruncateErrorCutsOnARuneBoundary: a text longer than MaxErrorBytes
// is cut to at most that many bytes, a rune the limit splits dropped
// whole (valid UTF-8 stays valid, whatever the rune's length), a text
// that fits is kept as it is, and stray bytes at the limit are cut as
// they are (never more than a rune's length before it).
func TestTruncateErrorCutsOnARuneBoundary(t *testing.T) {
	fits := strings.Repeat("x", MaxErrorBytes)
	require.Equal(t, fits, TruncateError(fits))
	for _, r := range []string{"é", "€", "😀"} {
		for pad := 1; pad <= len(r); pad++ {
			head := strings.Repeat("x", MaxErrorBytes-len(r)+pad)
			got := TruncateError(head + r + "tail")
			require.True(t, utf8.ValidString(got), "%q at offset %d", r, len(head))
			require.LessOrEqual(t, len(got), MaxErrorBytes)
			require.Equal(t, head, got, "%q split by the limit: dropped whole", r)
		}
		head := strings.Repeat("x", MaxErrorBytes-len(r))
		require.Equal(t, head+r, TruncateError(head+r+"tail"), "%q ending at the limit: kept", r)
	}
	stray := strings.Repeat("\x80", MaxErrorBytes+10)
	require.Len(t, TruncateError(stray), MaxErrorBytes-(utf8.UTFMax-1))
}
