//go:build unix

package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// watchdog ends a cluster's server when the test process ends, where the
// system has no parent-death signal. It is a shell reading its standard
// input, a pipe whose only writer is the test process (Go opens pipes
// close-on-exec: no other child inherits it). When the test process
// ends, however it ends (SIGKILL, a test timeout's panic), the system
// closes the pipe; the shell's read returns at end of file and it sends
// the server SIGQUIT (immediate shutdown). The shell runs in a process
// group of its own, so a Ctrl-C to the test's group does not end it
// before it has done so.
type watchdog struct {
	w   *os.File
	cmd *exec.Cmd
}

// watch starts a watchdog for the server whose process is pid.
func watch(pid int) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pgtest: watchdog: %w", err)
	}
	defer r.Close() // the shell has its own copy
	// "exit" means the server has exited (and its pid may be reused):
	// the shell ends without a signal.
	cmd := exec.Command("/bin/sh", "-c", `read line; [ "$line" = exit ] || kill -QUIT `+strconv.Itoa(pid))
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("pgtest: watchdog: %w", err)
	}
	return &watchdog{w: w, cmd: cmd}, nil
}

// release ends the watch once the server has exited, and waits for the
// shell. A nil watchdog does nothing.
func (d *watchdog) release() {
	if d == nil {
		return
	}
	_, _ = d.w.WriteString("exit\n")
	_ = d.w.Close()
	_ = d.cmd.Wait()
}
