package contract

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// NameProblem says what breaks the rule for IDs and names in s — valid
// UTF-8, no NUL byte, at most limit bytes (limitName names the limit in
// the message) — quoting at most s's first 32 bytes, or "" if nothing
// does ("" itself passes: whether a name may be empty is the caller's
// rule). The length is checked first, so a huge s costs nothing more.
// The core applies it to job and worker IDs (leaserouter.ValidateID,
// limit MaxIDBytes), pgrouter to queue names and fence keys.
func NameProblem(s string, limit int, limitName string) string {
	if len(s) > limit {
		return fmt.Sprintf("%s is %d bytes, above %s (%d)", Quote(s), len(s), limitName, limit)
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Sprintf("%s holds NUL at byte %d", Quote(s), i)
	}
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%s is not valid UTF-8 at byte %d", Quote(s), invalidUTF8At(s))
	}
	return ""
}

// invalidUTF8At is the offset of the first byte of s that does not start
// a valid UTF-8 sequence; len(s) if there is none.
func invalidUTF8At(s string) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(s)
}

// Quote quotes s for an error message, cut to at most its first 32 bytes
// (at a rune's start, when s is valid UTF-8 there).
func Quote(s string) string {
	if len(s) <= 32 {
		return fmt.Sprintf("%q", s)
	}
	k := 32
	for k > 28 && !utf8.RuneStart(s[k]) {
		k--
	}
	return fmt.Sprintf("%q...", s[:k])
}
