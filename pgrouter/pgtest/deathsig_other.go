//go:build unix && !linux

package pgtest

import "syscall"

// parentDeathSignal: no parent-death signal on this system (macOS, the
// BSDs): a watchdog process ends a cluster's server instead.
const parentDeathSignal = false

// serverAttr runs the server as cred (nil: as this process's user), in a
// process group of its own (a Ctrl-C to the test's group reaches the test,
// which shuts the server down, not the server). deathSignal is never set
// here.
func serverAttr(cred *syscall.Credential, deathSignal bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
