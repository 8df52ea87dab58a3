package leaserouter

import (
	"syscall"
	"time"
	"unsafe"
)

// threadUsage returns what the calling OS thread has used: its CPU time,
// to the nanosecond (clock_gettime(CLOCK_THREAD_CPUTIME_ID), which brings
// a running thread's count up to date; getrusage's user and system times
// move by scheduler ticks of several milliseconds), and, from
// getrusage(RUSAGE_THREAD), its page faults and the times it was switched
// out involuntarily (preempted) and voluntarily (blocked), and its ID. The
// caller has locked its goroutine to its thread.
func threadUsage() threadUse {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic(e)
	}
	var u syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &u); err != nil {
		panic(err)
	}
	return threadUse{time.Duration(ts.Nano()), u.Minflt + u.Majflt, u.Nivcsw, u.Nvcsw, syscall.Gettid()}
}

const haveThreadUsage = true
