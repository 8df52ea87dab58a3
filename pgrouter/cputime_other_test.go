//go:build !unix

package pgrouter_test

import "time"

// processCPU is 0: the process's CPU time is read on Unix systems only
// (the benchmarks' process CPU figures then read 0).
func processCPU() time.Duration { return 0 }
