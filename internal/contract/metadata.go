package contract

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// The limits of a job's metadata (leaserouter.MaxMetadataPairs and
// MaxMetadataBytes): small enough to travel with every claim.
const (
	MaxMetadataPairs = 64
	MaxMetadataBytes = 4096
)

// mergeMetadata is dst with src's pairs over it: src itself when dst is
// nil (both are copies already, owned by their options), else a new map,
// so an option's map is never written.
func mergeMetadata(dst, src map[string]string) map[string]string {
	if dst == nil {
		return src
	}
	out := make(map[string]string, len(dst)+len(src))
	maps.Copy(out, dst)
	maps.Copy(out, src)
	return out
}

// MetadataProblem says what breaks the rule for metadata in md, or ""
// when nothing does: at most MaxMetadataPairs pairs and MaxMetadataBytes
// bytes of keys and values in all; keys not empty; keys and values valid
// UTF-8 without NUL (a database's text refuses NUL). Keys are checked in
// sorted order, so the message names the same key every time.
func MetadataProblem(md map[string]string) string {
	if len(md) > MaxMetadataPairs {
		return fmt.Sprintf("%d pairs, above MaxMetadataPairs (%d)", len(md), MaxMetadataPairs)
	}
	n := 0
	for k, v := range md {
		n += len(k) + len(v)
	}
	if n > MaxMetadataBytes {
		return fmt.Sprintf("%d bytes of keys and values, above MaxMetadataBytes (%d)", n, MaxMetadataBytes)
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		if k == "" {
			return "an empty key"
		}
		if p := textProblem(k); p != "" {
			return "key " + p
		}
		if p := textProblem(md[k]); p != "" {
			return fmt.Sprintf("the value of key %s %s", Quote(k), p)
		}
	}
	return ""
}

// textProblem is NameProblem without a length limit.
func textProblem(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Sprintf("%s holds NUL at byte %d", Quote(s), i)
	}
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%s is not valid UTF-8 at byte %d", Quote(s), invalidUTF8At(s))
	}
	return ""
}
