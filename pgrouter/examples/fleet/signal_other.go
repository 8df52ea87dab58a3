//go:build !unix

package main

import (
	"errors"
	"os"
	"time"
)

// canPause: no SIGSTOP here (Windows): -pause must be 0.
const canPause = false

// defaultPause is -pause's default: never, as no process can be paused.
const defaultPause time.Duration = 0

func pauseProc(p *os.Process) error  { return errors.ErrUnsupported }
func resumeProc(p *os.Process) error { return errors.ErrUnsupported }

// stopProc kills a worker process: there is no SIGTERM to send here. Its
// leases are left to expire; the coordinator stops the workers only once
// every job is finished.
func stopProc(p *os.Process) error { return p.Kill() }
