//go:build !unix

package leaserouter

import "time"

// cpuTime is 0: the process's CPU time is read on Unix systems only (the
// benchmarks then leave out their CPU figures).
func cpuTime() time.Duration { return 0 }
