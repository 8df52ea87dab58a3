//go:build unix

package benchmarks

import (
	"syscall"
	"time"
)

// processCPU is this process's CPU time (user and system) so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
