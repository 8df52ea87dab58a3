//go:build unix

package main

import (
	"os"
	"syscall"
	"time"
)

// canPause: a worker process can be paused (SIGSTOP) and resumed
// (SIGCONT).
const canPause = true

// defaultPause is -pause's default.
const defaultPause = 500 * time.Millisecond

func pauseProc(p *os.Process) error  { return p.Signal(syscall.SIGSTOP) }
func resumeProc(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

// stopProc asks a worker process to stop (SIGTERM): Run lets running
// handlers finish (stalled ones write, late).
func stopProc(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
