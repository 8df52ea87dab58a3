package pgtest

import "syscall"

// parentDeathSignal: the system sends a child process a signal of the
// parent's choosing when the thread that started it ends (Linux's
// PR_SET_PDEATHSIG), so a cluster's server needs no watchdog.
const parentDeathSignal = true

// serverAttr runs the server as cred (nil: as this process's user), in a
// process group of its own (a Ctrl-C to the test's group reaches the test,
// which shuts the server down, not the server), sent SIGQUIT when the
// thread that started it ends if deathSignal is set.
func serverAttr(cred *syscall.Credential, deathSignal bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if deathSignal {
		a.Pdeathsig = syscall.SIGQUIT
	}
	return a
}
