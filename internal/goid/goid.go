// Package goid tells the calling goroutine's ID, for the one question the
// router cannot answer otherwise: "is this call coming from inside my own
// event-delivery goroutine?" (an OnEvent hook calling Close, or Enqueue
// while the backlog is full, must not wait for the delivery it is part of).
//
// Go offers no goroutine ID on purpose; the ID is read from the first line
// of runtime.Stack ("goroutine 42 [running]:"), as golang.org/x/net/http2
// does for its debug checks. It costs about a microsecond, so callers ask
// only on slow paths, never per operation.
package goid

import (
	"runtime"
	"strconv"
)

// Current returns the calling goroutine's ID, or 0 if it cannot be read.
func Current() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return 0
	}
	b = b[len(prefix):]
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	id, err := strconv.ParseUint(string(b[:n]), 10, 64)
	if err != nil {
		return 0
	}
	return id
}
