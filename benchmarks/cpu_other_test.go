//go:build !unix

package benchmarks

import "time"

// processCPU is 0: the process's CPU time is read on Unix systems only.
func processCPU() time.Duration { return 0 }
