package contract

import (
	"strings"
	"unicode/utf8"
)

// A job's error history, on every backend: how many attempts' records
// it keeps, and how long each error's text may be.

// MaxAttemptErrors is leaserouter.MaxAttemptErrors: the most records of
// failed attempts a job keeps, the most recent ones.
const MaxAttemptErrors = 25

// MaxErrorBytes is leaserouter.MaxErrorBytes: the longest text, in
// bytes, of a failed attempt's error (LastError and each record's).
const MaxErrorBytes = 4096

// TruncateError returns s cut to at most MaxErrorBytes bytes, on a rune
// boundary (a rune split by the cut is dropped whole: valid UTF-8 stays
// valid), or s itself when it fits. The cut text is a copy: it does not
// keep s's bytes alive.
func TruncateError(s string) string {
	if len(s) <= MaxErrorBytes {
		return s
	}
	// Back to the start of the rune s[MaxErrorBytes] belongs to: at most
	// UTFMax-1 bytes back. Bytes that are no valid UTF-8 there are cut
	// as they are.
	i := MaxErrorBytes
	for i > MaxErrorBytes-(utf8.UTFMax-1) && !utf8.RuneStart(s[i]) {
		i--
	}
	return strings.Clone(s[:i])
}
